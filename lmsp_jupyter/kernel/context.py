"""What ``--context`` adds to an ask: the session's cells, the user's variables, the last error.

Each source is a section of text in front of the prompt, held to a budget of tokens estimated
at :data:`CHARS_PER_TOKEN` characters a token, and trimmed line by line with a visible
``… [trimmed N lines]`` marker. "The cells above" are what the kernel can see: the cells this
session executed, oldest first (as typed), each with the text of its result (``Out``); printed
and displayed outputs are the front end's and are not in reach.
"""

from __future__ import annotations

import re
import reprlib
import sys
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import ExecutionResult, InteractiveShell

#: The sources ``--context`` takes.
SOURCES = ("cells", "vars", "error")
#: Characters per token of the estimate (English and code, roughly, for SentencePiece models).
CHARS_PER_TOKEN = 4
#: Tokens each source may take.
DEFAULT_BUDGET = 512
#: Rows of a DataFrame shown.
HEAD_ROWS = 3
#: Characters of the text of one cell's result, and of a variable's repr.
RESULT_CHARS = 400

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HIDDEN = {"In", "Out", "exit", "quit", "get_ipython"}
_IPYTHON_FRAMES = re.compile(r"[\\/](IPython|ipykernel)[\\/]")


@dataclass(frozen=True)
class CellError:
    """The last exception raised by a cell, and that cell."""

    error: BaseException
    source: str | None
    execution_count: int | None


def trim(text: str, budget: int = DEFAULT_BUDGET) -> str:
    """``text`` within ``budget`` tokens (estimated): whole lines, then a marker of the rest."""
    limit = budget * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > limit:
            break
        kept.append(line)
        used += len(line) + 1
    if not kept:  # one long line: its start
        kept = [lines[0][:limit]]
        return "\n".join([*kept, f"… [trimmed {len(lines)} lines]"])
    return "\n".join([*kept, f"… [trimmed {len(lines) - len(kept)} lines]"])


def cells_section(inputs: list[str], outputs: Mapping[int, Any]) -> str:
    """The cells of ``inputs`` (by execution count, from 1) but the last, the running one: each
    source, then the text of its result."""
    parts: list[str] = []
    for count in range(1, len(inputs) - 1):
        source = inputs[count].strip()
        if not source:
            continue
        parts.append(f"In [{count}]:\n{source}")
        if count in outputs:
            parts.append(f"Out[{count}]:\n{bounded_repr(outputs[count])}")
    return "\n".join(parts)


def raw_inputs(shell: InteractiveShell) -> list[str]:
    """The cells of the session as typed (``In`` holds them with magics translated)."""
    return list(shell.history_manager.input_hist_raw) if shell.history_manager else []


def prompt_names(prompt: str, namespace: Mapping[str, Any]) -> list[str]:
    """The user's variables the prompt names, in order, once each."""
    names = dict.fromkeys(_NAME.findall(prompt))
    return [name for name in names if _visible(name, namespace)]


def _visible(name: str, namespace: Mapping[str, Any]) -> bool:
    if name not in namespace or name.startswith("_") or name in _HIDDEN:
        return False
    return type(namespace[name]).__name__ != "module"


def vars_section(names: Iterable[str], namespace: Mapping[str, Any]) -> str:
    """Each named variable summarized (names not in the namespace are said to be undefined)."""
    return "\n".join(
        f"{name}: {summary(namespace[name])}" if name in namespace else f"{name}: (undefined)"
        for name in names
    )


def summary(value: Any) -> str:
    """A DataFrame as schema, shape and its first rows; an array as shape and dtype; else a
    bounded repr."""
    kind = type(value)
    module = kind.__module__.split(".", 1)[0]
    if module == "pandas" and kind.__name__ == "DataFrame":
        columns = "\n".join(f"  {name}: {dtype}" for name, dtype in value.dtypes.items())
        return (
            f"pandas.DataFrame, shape {value.shape}, columns:\n{columns}\n"
            f"first rows:\n{value.head(HEAD_ROWS).to_string()}"
        )
    if module == "polars" and kind.__name__ == "DataFrame":
        columns = "\n".join(f"  {name}: {dtype}" for name, dtype in value.schema.items())
        return (
            f"polars.DataFrame, shape {value.shape}, columns:\n{columns}\n"
            f"first rows:\n{value.head(HEAD_ROWS)}"
        )
    if module == "numpy" and kind.__name__ == "ndarray":
        return f"numpy.ndarray, shape {value.shape}, dtype {value.dtype}"
    return f"{kind.__name__} {bounded_repr(value)}"


def bounded_repr(value: Any) -> str:
    """``repr(value)`` cut to :data:`RESULT_CHARS` characters."""
    bounded = reprlib.Repr()
    bounded.maxstring = bounded.maxother = RESULT_CHARS
    shown = bounded.repr(value)
    return shown if len(shown) <= RESULT_CHARS else shown[:RESULT_CHARS] + "…"


def error_section(last: CellError, shell: InteractiveShell | None = None) -> str:
    """The failing cell's source and the traceback, without IPython's own frames; a cell's
    frames are named as IPython names them (``Cell In[4]``)."""
    error = last.error
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not _IPYTHON_FRAMES.search(frame.filename)
    ]
    for frame in frames:
        label = shell.compile.format_code_name(frame.filename) if shell else None
        if label:
            frame.filename = " ".join(label)
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    lines += traceback.format_exception_only(type(error), error)
    cell = "the failing cell" if last.execution_count is None else f"In [{last.execution_count}]"
    source = f"{cell}:\n{last.source.strip()}\n" if last.source else ""
    return f"{source}{''.join(lines).rstrip()}"


class ErrorRecorder:
    """Keeps the last exception a cell raised, with that cell (a ``post_run_cell`` hook).

    A magic's ``UsageError`` (a one-line message, no traceback) is not an error of the user's
    code and is not kept: ``%lmsp explain`` twice without an error says so twice.
    """

    def __init__(self) -> None:
        self.last: CellError | None = None

    def __call__(self, result: ExecutionResult) -> None:
        """Record ``result``'s error, if the cell raised one."""
        error = result.error_in_exec or result.error_before_exec
        if error is not None and not isinstance(error, UsageError):
            source = getattr(result.info, "raw_cell", None)
            self.last = CellError(error, source, result.execution_count)

    def current(self) -> CellError | None:
        """The last error: recorded, else the one IPython kept in ``sys.last_value``."""
        if self.last is not None:
            return self.last
        error = getattr(sys, "last_value", None)
        if not isinstance(error, BaseException) or isinstance(error, UsageError):
            return None
        return CellError(error, None, None)


_TITLES = {
    "cells": "Notebook cells executed so far, oldest first",
    "vars": "Variables",
    "error": "The last error",
}


def assemble(sections: Mapping[str, str], prompt: str, budget: int = DEFAULT_BUDGET) -> str:
    """The prompt with each source's section in front, under its title, in ``SOURCES`` order."""
    parts = [
        f"## {_TITLES[source]}\n{trim(sections[source], budget)}"
        for source in SOURCES
        if sections.get(source)
    ]
    return "\n\n".join([*parts, prompt])


def gather(
    sources: Iterable[str],
    shell: InteractiveShell,
    *,
    names: Iterable[str],
    errors: ErrorRecorder,
) -> dict[str, str]:
    """The text of each source asked for, read from ``shell``'s history and namespace."""
    namespace = shell.user_ns
    sections: dict[str, str] = {}
    for source in sources:
        if source == "cells":
            inputs = raw_inputs(shell)
            outputs = namespace.get("Out", {})
            sections[source] = cells_section(inputs, outputs)
        elif source == "vars":
            sections[source] = vars_section(names, namespace)
        elif source == "error":
            last = errors.current()
            sections[source] = error_section(last, shell) if last else "(no error so far)"
    return sections
