"""The IPython side of lmsp-jupyter: ``%lmsp`` magics, ``@tool``, and the answer widget.

``%load_ext lmsp_jupyter`` loads it. The kernel is a client like any other: it reaches the
service over HTTP (:func:`connect` chooses the client; by default it is discovered).
"""

from __future__ import annotations

from IPython.core.interactiveshell import InteractiveShell

from .answer import Answer
from .connection import connect
from .magics import LmspMagics
from .notebook_tools import insert_cell, notebook_tools, read_cell, replace_cell, run_cell
from .session import KernelSession
from .tools import Tool, tool

__all__ = [
    "Answer",
    "KernelSession",
    "Tool",
    "connect",
    "insert_cell",
    "load_ipython_extension",
    "notebook_tools",
    "read_cell",
    "replace_cell",
    "run_cell",
    "tool",
    "unload_ipython_extension",
]

_sessions: dict[int, KernelSession] = {}


def load_ipython_extension(shell: InteractiveShell) -> None:
    """Register ``%lmsp`` and the ``lmsp`` comm target in ``shell``."""
    session = KernelSession(shell)
    shell.register_magics(LmspMagics(shell, session))
    session.open()
    _sessions[id(shell)] = session


def unload_ipython_extension(shell: InteractiveShell) -> None:
    """Remove ``%lmsp`` and the comm target again."""
    session = _sessions.pop(id(shell), None)
    if session is not None:
        session.close()
    for kind in ("line", "cell"):
        shell.magics_manager.magics[kind].pop("lmsp", None)
