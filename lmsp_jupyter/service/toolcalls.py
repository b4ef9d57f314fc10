"""Native tool-call formats of current chat templates, parsed from a model's whole answer."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from ..protocol.requests import FunctionTool

#: Text an answer starts with when it is a call, in the formats recognised below.
CALL_MARKERS = ("<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "<|tool_call|>", "{")

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_MISTRAL_ARGS = re.compile(r"\[TOOL_CALLS\]\s*([A-Za-z0-9_.-]+)\s*\[ARGS\]\s*(.*)", re.S)


@dataclass(frozen=True)
class ParsedCall:
    """A call found in an answer: the function's name and its JSON arguments."""

    name: str
    arguments: str


def parse_calls(text: str, tools: Sequence[FunctionTool]) -> list[ParsedCall] | None:
    """The calls in ``text`` if it is nothing but valid calls of ``tools``, else ``None``.

    Formats: Hermes/Qwen ``<tool_call>{…}</tool_call>`` (one or more), Mistral
    ``[TOOL_CALLS][{…}]`` and ``[TOOL_CALLS]name[ARGS]{…}``, Llama 3.x JSON
    ``{"name", "parameters"}`` (after ``<|python_tag|>`` or alone), Granite ``<|tool_call|>[…]``.
    """
    stripped = text.strip()
    objects = _objects(stripped)
    if not objects:
        return None
    calls = [_call(obj, tools) for obj in objects]
    if any(call is None for call in calls):
        return None
    return [call for call in calls if call is not None]


def _objects(text: str) -> list[Any] | None:
    if text.startswith("<tool_call>"):
        bodies = _HERMES.findall(text)
        if not bodies or _HERMES.sub("", text).strip():
            return None
        return [loads_or(body) for body in bodies]
    if text.startswith("[TOOL_CALLS]"):
        named = _MISTRAL_ARGS.fullmatch(text)
        if named is not None:
            return [{"name": named[1], "arguments": loads_or(named[2])}]
        value = loads_or(text.removeprefix("[TOOL_CALLS]"))
        return value if isinstance(value, list) else None
    for prefix in ("<|python_tag|>", "<|tool_call|>"):
        if text.startswith(prefix):
            value = loads_or(text.removeprefix(prefix))
            return value if isinstance(value, list) else [value]
    if text.startswith("{"):
        return [loads_or(text)]
    return None


def loads_or(text: str, fallback: Any = None) -> Any:
    """The JSON value ``text`` holds, or ``fallback`` when it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return fallback


def _call(obj: Any, tools: Sequence[FunctionTool]) -> ParsedCall | None:
    """A call that names one of ``tools`` with arguments valid for its parameters."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    arguments = obj.get("arguments", obj.get("parameters"))
    if isinstance(arguments, str):
        arguments = loads_or(arguments)
    tool = next((t for t in tools if t.name == obj["name"]), None)
    if tool is None or not isinstance(arguments, dict) or not valid(arguments, tool.parameters):
        return None
    return ParsedCall(tool.name, json.dumps(arguments, ensure_ascii=False))


def valid(instance: Any, schema: dict[str, Any]) -> bool:
    """Whether ``instance`` validates against the JSON Schema ``schema``."""
    try:
        jsonschema.validate(instance, schema)
    except (jsonschema.ValidationError, jsonschema.SchemaError):
        return False
    return True
