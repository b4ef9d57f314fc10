"""How a request is decoded: free text, text held to a JSON Schema, or a forced function call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engine.generation import GrammarError, ToolSpec
from ..engine.grammar import check_enforceable, json_schema_grammar
from ..protocol.errors import LmspError
from ..protocol.requests import FunctionTool, JsonSchemaFormat, NamedToolChoice, ResponseRequest
from .output import ContentMode


@dataclass(frozen=True)
class DecodingPlan:
    """The content mode, the grammar that enforces it, and what the final output must satisfy."""

    mode: ContentMode
    grammar: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    #: The schema the message text must validate against (structured output).
    schema: dict[str, Any] | None = None
    callable_tools: tuple[FunctionTool, ...] = field(default=())


def plan(request: ResponseRequest) -> DecodingPlan:
    """The decoding of ``request``; a schema the decoder cannot enforce is a 400."""
    tools = tuple(request.tools or ())
    choice = request.tool_choice or "auto"
    for index, tool in enumerate(tools):
        _enforceable(tool.parameters, f"tools[{index}].parameters")
    specs = tuple(ToolSpec(t.name, t.description, t.parameters) for t in tools)
    if tools and (choice == "required" or isinstance(choice, NamedToolChoice)):
        chosen = [
            t for t in tools if not isinstance(choice, NamedToolChoice) or t.name == choice.name
        ]
        grammar = _grammar(_call_schema(chosen), "tools", ["name", "arguments"])
        return DecodingPlan(ContentMode.FORCED_CALL, grammar, specs, callable_tools=tuple(chosen))
    offered = specs if tools and choice == "auto" else ()
    mode = ContentMode.AUTO if offered else ContentMode.TEXT
    if isinstance(request.response_format, JsonSchemaFormat):
        schema = request.response_format.json_schema.schema_
        _enforceable(schema, "response_format")
        grammar = _grammar(schema, "response_format")
        return DecodingPlan(ContentMode.TEXT, grammar, offered, schema=schema)
    return DecodingPlan(mode, None, offered, callable_tools=tools if offered else ())


def _call_schema(tools: list[FunctionTool]) -> dict[str, Any]:
    """A call of one of ``tools``: its name, then arguments valid for its parameters."""
    variants = [
        {
            "type": "object",
            "properties": {"name": {"const": tool.name}, "arguments": tool.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def _enforceable(schema: dict[str, Any], param: str) -> None:
    try:
        check_enforceable(schema)
    except GrammarError as exc:
        raise LmspError("invalid_request", str(exc), param=param) from None


def _grammar(schema: dict[str, Any], param: str, order: list[str] | None = None) -> str:
    try:
        return json_schema_grammar(schema, order)
    except GrammarError as exc:
        raise LmspError("invalid_request", str(exc), param=param) from None
