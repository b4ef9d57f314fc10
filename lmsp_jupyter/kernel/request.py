"""The first round's request of an ask: its options with names taken from the user's namespace."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from IPython.core.error import UsageError
from pydantic import BaseModel

from ..protocol.logprobs import LOGPROBS_INCLUDE
from ..protocol.models import EXTENSION_KEY
from .context import assemble
from .mcp import McpApprovals, mcp_tool_choice, mcp_tools
from .notebook_tools import notebook_tools
from .options import AskOptions
from .tools import Tool

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CHOICES = ("auto", "required", "none")


def fill(text: str, namespace: Mapping[str, Any]) -> str:
    """Replace ``{name}`` with the value of ``name``; ``{{`` and ``}}`` stand for braces."""

    def value(match: re.Match[str]) -> str:
        name = match[1]
        if name is None:
            return match[0][0]
        if name not in namespace:
            raise UsageError(f"{{{name}}} names nothing in the namespace (write {{{{ for a brace)")
        return str(namespace[name])

    return _PLACEHOLDER.sub(value, text)


def ask_request(
    options: AskOptions,
    namespace: Mapping[str, Any],
    *,
    default_model: Callable[[], str],
    previous_response_id: str | None = None,
    context: Mapping[str, str] | None = None,
    approvals: McpApprovals | None = None,
) -> tuple[dict[str, Any], dict[str, Tool]]:
    """The request of the ask's first round (stored, so it can be continued) and its tools.

    ``context`` holds the text of each ``--context`` source, put in front of the prompt.
    ``approvals``: the MCP tools approved for the session, which need no approval.

    ``default_model`` is asked only when there is no ``--model`` and every name resolved.
    """
    tools = resolve_tools(options.tools, namespace)
    if options.notebook_tools:
        tools = offer_notebook_tools(tools)
    prompt = assemble(context or {}, fill(options.prompt, namespace))
    messages = [{"role": "user", "content": prompt}]
    if options.system is not None:
        messages.insert(0, {"role": "system", "content": fill(options.system, namespace)})
    request: dict[str, Any] = {
        "model": options.model,
        "input": [{"type": "message", **message} for message in messages],
        "store": True,
    }
    if options.max_tokens is not None:
        request["max_output_tokens"] = options.max_tokens
    if options.temperature is not None:
        request["temperature"] = options.temperature
    for field in ("frequency_penalty", "presence_penalty"):
        if getattr(options, field) is not None:
            request[field] = getattr(options, field)
    if options.logprobs is not None:
        request.update(include=[LOGPROBS_INCLUDE], top_logprobs=options.logprobs)
    if options.json is not None:
        request["response_format"] = response_format(options.json, namespace)
    offered = [tool.definition() for tool in tools.values()]
    offered += mcp_tools(options.mcp, approvals or McpApprovals())
    if offered:
        request["tools"] = offered
    if options.tool_choice is not None:
        request["tool_choice"] = tool_choice(options, tools, namespace)
    if previous_response_id is not None:
        request["previous_response_id"] = previous_response_id
    if options.prediction is not None:
        prediction = {"type": "content", "content": fill(options.prediction, namespace)}
        request["extensions"] = {EXTENSION_KEY: {"prediction": prediction}}
    request["model"] = options.model or default_model()
    return request, tools


def resolve_tools(names: tuple[str, ...], namespace: Mapping[str, Any]) -> dict[str, Tool]:
    """The tools named in ``--tools``, by their tool names."""
    tools: dict[str, Tool] = {}
    for name in names:
        value = namespace.get(name)
        if not isinstance(value, Tool):
            what = "nothing" if name not in namespace else "no function decorated with @tool"
            raise UsageError(f"--tools: {name!r} names {what}")
        tools[value.name] = value
    return tools


def offer_notebook_tools(tools: dict[str, Tool]) -> dict[str, Tool]:
    """``--notebook-tools``: the notebook tools after ``tools``, whose names they must not take."""
    offered = notebook_tools()
    taken = sorted(name for name, tool in tools.items() if offered.get(name, tool) is not tool)
    if taken:
        raise UsageError(f"--tools: {', '.join(taken)} clashes with a notebook tool's name")
    return {**tools, **offered}


def tool_choice(options: AskOptions, tools: dict[str, Tool], namespace: Mapping[str, Any]) -> Any:
    """``auto``, ``required``, ``none``, one tool of ``--tools`` (by variable or tool name) or
    ``LABEL:TOOL``, a tool of an ``--mcp`` server."""
    choice = options.tool_choice
    assert choice is not None
    if choice in _CHOICES:
        if choice == "required" and not tools and not options.mcp:
            raise UsageError("--tool-choice required needs --tools or --mcp")
        return choice
    if ":" in choice and options.mcp:
        return mcp_tool_choice(choice, options.mcp)
    chosen = namespace.get(choice) if choice in options.tools else tools.get(choice)
    if not isinstance(chosen, Tool):
        raise UsageError(
            f"--tool-choice {choice!r} is not auto, required, none, one of --tools "
            "or LABEL:TOOL of --mcp"
        )
    return {"type": "function", "name": chosen.name}


def response_format(value: str, namespace: Mapping[str, Any]) -> dict[str, Any]:
    """``--json``: a JSON Schema dict or pydantic model class by name, or a literal schema."""
    if value.startswith("{"):
        name, schema = "output", json.loads(value)
    elif value not in namespace:
        raise UsageError(f"--json: {value!r} names nothing in the namespace and is not JSON")
    else:
        found = namespace[value]
        if isinstance(found, type) and issubclass(found, BaseModel):
            name, schema = found.__name__, found.model_json_schema()
        elif isinstance(found, dict):
            name, schema = value, found
        else:
            raise UsageError(
                f"--json: {value!r} is neither a JSON Schema dict nor a pydantic model"
            )
    return {
        "type": "json_schema",
        "json_schema": {"name": name[:64], "schema": schema, "strict": True},
    }
