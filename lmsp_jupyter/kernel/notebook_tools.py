"""Notebook tools: the model reads, inserts, replaces and runs cells, each call approved.

The kernel cannot see the notebook document; JupyterLab's view of an ask can (the lab
extension's renderer of the answer, in the asking cell's output). So these tools are offered
to the model like any ``@tool`` — their JSON Schemas come from the typed signatures below —
and wait for the user's approval in the cell like any call; on **Approve** that view performs
the call on its notebook and sends the result back on the ``lmsp`` comm as the call's output
(``labextension/src/notebook/tools.ts``). On **Deny** nothing changes and the model is told so.

Cells are addressed by ``index``: from 0, the first cell of the notebook; with
``relative: true``, counted from the cell that asks (-1 the cell above it, 1 the one below).
Outputs are JSON objects; a call that cannot be done (no such cell, a Markdown cell to run)
gets ``error: ...`` and changes nothing.

A call approved anywhere else (the anywidget view outside JupyterLab, ``answer.approve()``)
runs the tool in the kernel instead, which tells the model that notebook tools need JupyterLab;
a terminal refuses them when the ask starts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Literal

from .tools import Tool

#: Why a notebook tool approved outside JupyterLab did nothing: the output the model gets.
NEEDS_JUPYTERLAB = (
    "error: {name} works on the notebook open in JupyterLab, where the lmsp-jupyter lab "
    "extension performs it when Approve is clicked in the asking cell's output; this call "
    "was approved elsewhere, so nothing was done."
)


class NotebookTool(Tool):
    """A tool whose approved calls JupyterLab performs on the notebook; always asks first.

    ``parameters`` is a function whose typed signature and "Args:" section give the JSON
    Schema; run in the kernel, the tool only says that it needs JupyterLab.
    """

    runs_in = "notebook"

    def __init__(self, parameters: Callable[..., None], *, name: str, description: str) -> None:
        super().__init__(parameters, policy="ask", name=name, description=description)
        self.function = functools.partial(_needs_jupyterlab, name)
        self.__name__ = self.__qualname__ = name
        self.__doc__ = description


def _needs_jupyterlab(name: str, *arguments: object, **named: object) -> str:
    return NEEDS_JUPYTERLAB.format(name=name)


def _a_cell(index: int, relative: bool = False) -> None:
    """A cell of the notebook.

    Args:
        index: Which cell: from 0, the first cell of the notebook; with relative, counted
            from the cell that asks (-1 is the cell above it).
        relative: Count index from the cell that asks instead of from the first cell.
    """


def _a_new_cell(
    source: str,
    index: int | None = None,
    relative: bool = False,
    cell_type: Literal["code", "markdown"] = "code",
) -> None:
    """A new cell.

    Args:
        source: The new cell's source.
        index: The position of the new cell: from 0, the top of the notebook (past the end
            appends); with relative, counted from the cell that asks (1 is right below it).
            Without index the cell goes right below the cell that asks.
        relative: Count index from the cell that asks instead of from the first cell.
        cell_type: A code or a Markdown cell.
    """


def _a_cell_and_source(index: int, source: str, relative: bool = False) -> None:
    """A cell of the notebook and its new source.

    Args:
        index: Which cell: from 0, the first cell of the notebook; with relative, counted
            from the cell that asks (-1 is the cell above it).
        source: The cell's new source.
        relative: Count index from the cell that asks instead of from the first cell.
    """


read_cell = NotebookTool(
    _a_cell,
    name="read_cell",
    description="Read a cell of this notebook: its index, type, source, and its outputs as text.",
)
insert_cell = NotebookTool(
    _a_new_cell,
    name="insert_cell",
    description="Insert a new cell into this notebook; the output gives the index it got.",
)
replace_cell = NotebookTool(
    _a_cell_and_source,
    name="replace_cell",
    description="Replace the source of a cell of this notebook (its outputs stay until it "
    "runs again).",
)
run_cell = NotebookTool(
    _a_cell,
    name="run_cell",
    description="Run a code cell of this notebook in its kernel; the output gives its "
    "outputs as text.",
)


def notebook_tools() -> dict[str, Tool]:
    """The four notebook tools by name (what ``%lmsp ask --notebook-tools`` offers).

    Each is also importable alone, to offer fewer: ``from lmsp_jupyter import read_cell``,
    then ``%lmsp ask --tools read_cell ...``.
    """
    return {tool.name: tool for tool in (read_cell, insert_cell, replace_cell, run_cell)}
