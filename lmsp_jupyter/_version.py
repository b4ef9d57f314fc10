"""The package version, as installed: written once, in labextension/package.json."""

from importlib.metadata import version

__version__ = version("lmsp-jupyter")
