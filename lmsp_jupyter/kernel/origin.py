"""Where an ask comes from: the task metadata that lets a front end find its answer again.

A kernel that jupyter-server started for a notebook knows the notebook (``JPY_SESSION_NAME``,
made relative to the server's root as the contents API names it), the cell being run
(JupyterLab sends ``cellId`` in the execute request's metadata, with the cell's source as
``code``) and its own id. Plain IPython and scripts know none of these and record nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from ..protocol.environment import ROOT_VARIABLE

#: Set by jupyter-server for the kernels it starts for a session: the session's path.
SESSION_VARIABLE = "JPY_SESSION_NAME"
#: The longest metadata value the service takes (LMSP 1.0 section 11.1).
_MAX_VALUE = 512

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = 2**64 - 1


def source_hash(source: str) -> str:
    """FNV-1a (64 bit) of the UTF-8 source, 16 hex digits: the front end computes the same."""
    value = _FNV_OFFSET
    for byte in source.encode():
        value = ((value ^ byte) * _FNV_PRIME) & _MASK
    return f"{value:016x}"


def notebook_path(environ: Mapping[str, str]) -> str | None:
    """The kernel's notebook as the contents API names it (``dir/x.ipynb``), if it has one.

    jupyter-server gives its kernels the session's path joined to the directory it starts
    them in; under the server's root it becomes root-relative, with ``/`` separators.
    """
    session = environ.get(SESSION_VARIABLE)
    if not session:
        return None
    root = environ.get(ROOT_VARIABLE)
    if root and os.path.isabs(session):
        relative = os.path.relpath(session, root)
        if not relative.startswith(os.pardir):
            return PurePath(relative).as_posix()
    return session


def ask_origin(
    kernel: Any, kernel_id: str | None, environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The metadata of an ask started now in ``kernel`` (``None``: not a kernel → ``{}``)."""
    if kernel is None:
        return {}
    origin: dict[str, str] = {}
    notebook = notebook_path(environ)
    if notebook:
        origin["notebook"] = notebook
    get_parent = getattr(kernel, "get_parent", None)
    parent = get_parent("shell") if callable(get_parent) else {}
    cell = (parent.get("metadata") or {}).get("cellId")
    if isinstance(cell, str) and cell:
        origin["cell"] = cell
        code = (parent.get("content") or {}).get("code")
        if isinstance(code, str):
            origin["source_hash"] = source_hash(code)
    if kernel_id:
        origin["kernel"] = kernel_id
    # a value the service would refuse must not make the ask fail: it is only a hint
    return {key: value for key, value in origin.items() if len(value) <= _MAX_VALUE}
