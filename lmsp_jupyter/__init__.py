"""lmsp-jupyter: a Jupyter server as a local model service speaking LMSP 1.0."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    # re-exported (``as``): the names of __all__ that __getattr__ imports on first use
    from .kernel.notebook_tools import insert_cell as insert_cell
    from .kernel.notebook_tools import notebook_tools as notebook_tools
    from .kernel.notebook_tools import read_cell as read_cell
    from .kernel.notebook_tools import replace_cell as replace_cell
    from .kernel.notebook_tools import run_cell as run_cell
    from .kernel.tools import tool as tool

#: The kernel side's public names, imported on first use (IPython, widgets): not by the server.
_KERNEL_NAMES = {
    "tool": "tools",
    **dict.fromkeys(
        ("notebook_tools", "read_cell", "insert_cell", "replace_cell", "run_cell"),
        "notebook_tools",
    ),
}

__all__ = ["__version__", "load_ipython_extension", "unload_ipython_extension", *_KERNEL_NAMES]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .server.app import LmspApp

    return [{"module": "lmsp_jupyter", "app": LmspApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    # lets `jupyter labextension develop --overwrite .` link the built extension for development
    return [{"src": "labextension", "dest": "lmsp-jupyter"}]


def __getattr__(name: str) -> Any:
    # the kernel side (IPython, widgets) is imported only where it is used, not by the server
    if name in _KERNEL_NAMES:
        import importlib

        return getattr(importlib.import_module(f".kernel.{_KERNEL_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'lmsp_jupyter' has no attribute {name!r}")


def load_ipython_extension(shell: InteractiveShell) -> None:
    """``%load_ext lmsp_jupyter``: the ``%lmsp`` magics and the answer widget's comm target."""
    from .kernel import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell: InteractiveShell) -> None:
    """``%unload_ext lmsp_jupyter``."""
    from .kernel import unload_ipython_extension as unload

    unload(shell)
