"""The options of ``%lmsp ask`` and ``%%lmsp``: options first, then the prompt verbatim."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from IPython.core.error import UsageError

from ..protocol.logprobs import MAX_TOP_LOGPROBS
from .context import SOURCES

_VALUED = (
    "--model",
    "--system",
    "--max-tokens",
    "--temperature",
    "--frequency-penalty",
    "--presence-penalty",
    "--logprobs",
    "--json",
    "--tools",
    "--mcp",
    "--tool-choice",
    "--prediction",
    "--context",
    "--vars",
)
_FLAGS = ("--continue", "--notebook-tools")
_OPTION = re.compile(r"--[A-Za-z-]*")


@dataclass(frozen=True)
class AskOptions:
    """One ask as the user wrote it; names are resolved later, in the user's namespace."""

    prompt: str
    model: str | None = None
    system: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    #: Token logprobs with this many alternatives each (0-20); ``None``: none.
    logprobs: int | None = None
    json: str | None = None
    tools: tuple[str, ...] = ()
    #: Offer the notebook tools too (read, insert, replace, run cells; JupyterLab only).
    notebook_tools: bool = False
    #: ``--mcp``: the labels of MCP servers the service runs, whose tools are offered.
    mcp: tuple[str, ...] = ()
    tool_choice: str | None = None
    continue_: bool = False
    #: The answer as expected, mostly (the code being edited): verified, never copied.
    prediction: str | None = None
    #: ``--context``: the sources put in front of the prompt (``cells``, ``vars``, ``error``).
    context: tuple[str, ...] = ()
    #: ``--vars``: the variables summarized besides those the prompt names.
    vars: tuple[str, ...] = ()


def parse_ask(line: str, body: str | None = None, *, default: str | None = None) -> AskOptions:
    """Parse ``[options] prompt`` (line magic) or ``[options]`` + ``body`` (cell magic).

    A value may be a bare word, a quoted string or a JSON object; ``--`` ends the options.
    Without a prompt the ask is ``default``, if given.
    """
    given: dict[str, str] = {}
    position = _skip_spaces(line, 0)
    while line.startswith("--", position):
        name = _OPTION.match(line, position)
        assert name is not None  # the pattern matches any "--"
        option, position = name[0], name.end()
        if option == "--":
            break
        if option in given:
            raise UsageError(f"{option} is given twice")
        if option in _FLAGS:
            given[option] = ""
        elif option in _VALUED:
            if line.startswith("=", position):
                position += 1
            given[option], position = _value(line, _skip_spaces(line, position), option)
        else:
            raise UsageError(f"unknown option {option}")
        position = _skip_spaces(line, position)
    rest = line[_skip_spaces(line, position) :].strip()
    if body is not None and rest:
        raise UsageError(f"%%lmsp takes its prompt from the cell, not from the line: {rest!r}")
    prompt = (rest if body is None else body.strip()) or default
    if not prompt:
        raise UsageError("the ask has no prompt")
    return _options(prompt, given)


def _options(prompt: str, given: dict[str, str]) -> AskOptions:
    tools = _names(given, "--tools")
    variables = _names(given, "--vars")
    context = _names(given, "--context")
    unknown = [source for source in context if source not in SOURCES]
    if unknown:
        raise UsageError(
            f"--context takes {', '.join(SOURCES)} separated by commas, not {unknown[0]!r}"
        )
    if variables and "vars" not in context:
        context += ("vars",)
    return AskOptions(
        prompt=prompt,
        model=given.get("--model"),
        system=given.get("--system"),
        max_tokens=_max_tokens(given.get("--max-tokens")),
        temperature=_number(given.get("--temperature"), "--temperature", 0, 2),
        frequency_penalty=_number(given.get("--frequency-penalty"), "--frequency-penalty", -2, 2),
        presence_penalty=_number(given.get("--presence-penalty"), "--presence-penalty", -2, 2),
        logprobs=_logprobs(given.get("--logprobs")),
        json=given.get("--json"),
        tools=tools,
        notebook_tools="--notebook-tools" in given,
        mcp=_names(given, "--mcp"),
        tool_choice=given.get("--tool-choice"),
        continue_="--continue" in given,
        prediction=given.get("--prediction"),
        context=context,
        vars=variables,
    )


def _names(given: dict[str, str], option: str) -> tuple[str, ...]:
    """A comma-separated value as its names."""
    if option not in given:
        return ()
    names = tuple(name.strip() for name in given[option].split(","))
    if any(not name for name in names):
        raise UsageError(f"{option} takes names separated by commas, not {given[option]!r}")
    return names


def _value(line: str, start: int, option: str) -> tuple[str, int]:
    """The value at ``start`` and the position after it."""
    if start >= len(line):
        raise UsageError(f"{option} needs a value")
    first = line[start]
    if first in "{[":
        try:
            _, end = json.JSONDecoder().raw_decode(line, start)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{option}: not valid JSON: {exc.msg} at column {exc.colno}") from None
        return line[start:end], end
    if first in "\"'":
        end = line.find(first, start + 1)
        if end < 0:
            raise UsageError(f"{option}: the quote {first} is not closed")
        return line[start + 1 : end], end + 1
    end = start
    while end < len(line) and not line[end].isspace():
        end += 1
    return line[start:end], end


def _max_tokens(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"--max-tokens takes a whole number ≥ 1, not {value!r}")
    return int(value)


def _number(value: str | None, option: str, low: float, high: float) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not low <= number <= high:
        raise UsageError(f"{option} takes a number from {low} to {high}, not {value!r}")
    return number


def _logprobs(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or int(value) > MAX_TOP_LOGPROBS:
        raise UsageError(
            f"--logprobs takes a whole number from 0 to {MAX_TOP_LOGPROBS}, not {value!r}"
        )
    return int(value)


def _skip_spaces(line: str, position: int) -> int:
    while position < len(line) and line[position].isspace():
        position += 1
    return position
