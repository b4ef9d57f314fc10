"""lmsp-jupyter: a Jupyter server as a local model service speaking LMSP 1.0."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from .kernel.tools import tool

__all__ = ["__version__", "load_ipython_extension", "tool", "unload_ipython_extension"]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .server.app import LmspApp

    return [{"module": "lmsp_jupyter", "app": LmspApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    # lets `jupyter labextension develop --overwrite .` link the built extension for development
    return [{"src": "labextension", "dest": "lmsp-jupyter"}]


def __getattr__(name: str) -> Any:
    # the kernel side (IPython, widgets) is imported only where it is used, not by the server
    if name == "tool":
        from .kernel.tools import tool

        return tool
    raise AttributeError(f"module 'lmsp_jupyter' has no attribute {name!r}")


def load_ipython_extension(shell: InteractiveShell) -> None:
    """``%load_ext lmsp_jupyter``: the ``%lmsp`` magics and the answer widget's comm target."""
    from .kernel import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell: InteractiveShell) -> None:
    """``%unload_ext lmsp_jupyter``."""
    from .kernel import unload_ipython_extension as unload

    unload(shell)
