"""What a tool's docstring tells the model: a description and one line per parameter."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

_GOOGLE_HEADER = re.compile(r"^(Args|Arguments|Parameters)\s*:\s*$")
_GOOGLE_ENTRY = re.compile(r"^(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_RULE = re.compile(r"^-{3,}\s*$")
_NUMPY_ENTRY = re.compile(r"^(\w+)\s*(:.*)?$")


@dataclass(frozen=True)
class Docstring:
    """The first paragraph of a docstring and the descriptions of its parameters."""

    description: str = ""
    parameters: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> Docstring:
    """Read a Google-style ("Args:") or NumPy-style ("Parameters" + rule) docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    paragraph: list[str] = []
    for line in lines:
        if not line.strip() or _GOOGLE_HEADER.match(line):
            break
        paragraph.append(line.strip())
    return Docstring(" ".join(paragraph), _google_args(lines) or _numpy_parameters(lines))


def _google_args(lines: list[str]) -> dict[str, str]:
    start = next((i + 1 for i, line in enumerate(lines) if _GOOGLE_HEADER.match(line)), None)
    if start is None:
        return {}
    entries: dict[str, list[str]] = {}
    entry_indent: int | None = None
    current: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            break  # the next section
        entry_indent = indent if entry_indent is None else entry_indent
        match = _GOOGLE_ENTRY.match(line.strip())
        if indent == entry_indent and match:
            current = entries.setdefault(match[1], [])
            current.append(match[3])
        elif indent > entry_indent:
            current.append(line.strip())
    return {name: " ".join(part for part in text if part) for name, text in entries.items()}


def _numpy_parameters(lines: list[str]) -> dict[str, str]:
    start = next(
        (
            i + 2
            for i, line in enumerate(lines[:-1])
            if line.strip() == "Parameters" and _NUMPY_RULE.match(lines[i + 1])
        ),
        None,
    )
    if start is None:
        return {}
    entries: dict[str, list[str]] = {}
    current: list[str] = []
    for index, line in enumerate(lines[start:], start):
        if index + 1 < len(lines) and _NUMPY_RULE.match(lines[index + 1]):
            break  # the next section's title
        match = _NUMPY_ENTRY.match(line)
        if match and not line[:1].isspace():
            current = entries.setdefault(match[1], [])
        elif line.strip():
            current.append(line.strip())
    return {name: " ".join(text) for name, text in entries.items()}
