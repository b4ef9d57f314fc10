"""How a request is decoded: free text, text held to a JSON Schema, or a forced function call."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..engine.generation import GrammarError, ToolSpec
from ..engine.guidance import check_schema
from ..protocol.errors import LmspError
from ..protocol.items import OutputFunctionCall, OutputMcpApprovalRequest, OutputMcpCall
from ..protocol.requests import (
    AllowedToolsChoice,
    FunctionTool,
    JsonSchemaFormat,
    NamedToolChoice,
    ResponseRequest,
)
from .output import ContentMode, OutputBuilder
from .toolcalls import valid


@dataclass(frozen=True)
class DecodingPlan:
    """The content mode, the schema decoding enforces, and what the final output must satisfy."""

    mode: ContentMode
    #: The JSON Schema every generated text is held to while decoding, if any.
    constraint: dict[str, Any] | None = None
    tools: tuple[ToolSpec, ...] = ()
    #: The schema the message text must validate against (structured output).
    schema: dict[str, Any] | None = None
    callable_tools: tuple[FunctionTool, ...] = field(default=())

    @property
    def constraint_param(self) -> str:
        """The request field a refused ``constraint`` comes from."""
        return "response_format" if self.schema is not None else "tools"


def plan(request: ResponseRequest, *, last: bool = False) -> DecodingPlan:
    """The decoding of ``request``; a schema the decoder cannot enforce is ``invalid_request``.
    The ``last`` round of a response calls no tools (``tool_choice`` ``none``)."""
    tools = tuple(request.function_tools())
    choice = "none" if last else request.tool_choice or "auto"
    if isinstance(choice, AllowedToolsChoice):  # the listed tools, offered as ``mode`` says
        allowed = {tool.name for tool in choice.tools}
        tools, choice = tuple(t for t in tools if t.name in allowed), choice.mode
    for index, tool in enumerate(tools):
        _enforceable(tool.parameters, f"tools[{index}].parameters")
    specs = tuple(ToolSpec(t.name, t.description, t.parameters) for t in tools)
    if tools and (choice == "required" or isinstance(choice, NamedToolChoice)):
        chosen = [
            t for t in tools if not isinstance(choice, NamedToolChoice) or t.name == choice.name
        ]
        envelope = _call_schema(chosen)
        _enforceable(envelope, "tools")
        return DecodingPlan(ContentMode.FORCED_CALL, envelope, specs, callable_tools=tuple(chosen))
    offered = specs if tools and choice == "auto" else ()
    mode = ContentMode.AUTO if offered else ContentMode.TEXT
    if isinstance(request.response_format, JsonSchemaFormat):
        schema = request.response_format.json_schema.schema_
        _enforceable(schema, "response_format")
        return DecodingPlan(ContentMode.TEXT, schema, offered, schema=schema)
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
        check_schema(schema)
    except GrammarError as exc:
        raise LmspError("invalid_request", str(exc), param=param) from None


def breach(decoding: DecodingPlan, output: OutputBuilder) -> LmspError | None:
    """A complete output that breaks its contract (constrained decoding makes this impossible)."""
    problems: list[str] = []
    if decoding.schema is not None and not _valid_json(output.message_text, decoding.schema):
        problems.append("the output is not JSON valid against the schema")
    if decoding.mode is ContentMode.FORCED_CALL:
        tools = {tool.name: tool for tool in decoding.callable_tools}
        calls = [item for item in output.items if isinstance(item, _CALLS)]
        for item in calls:
            tool = tools.get(item.name)
            if (isinstance(item, OutputFunctionCall) and tool is None) or (
                tool is not None and not _valid_json(item.arguments, tool.parameters)
            ):
                problems.append(f"the call of {item.name!r} does not validate")
        if not calls:
            problems.append("no function call was produced")
    if not problems:
        return None
    return LmspError("generation_failed", "; ".join(problems))


#: The items a forced call becomes: a function call, or an MCP call run or held (11.6).
_CALLS = (OutputFunctionCall, OutputMcpCall, OutputMcpApprovalRequest)


def _valid_json(text: str | None, schema: dict[str, Any]) -> bool:
    try:
        return valid(json.loads(text or ""), schema)
    except json.JSONDecodeError:
        return False
