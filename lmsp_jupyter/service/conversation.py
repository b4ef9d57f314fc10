"""From LMSP input items to the chat messages a template renders."""

from __future__ import annotations

from collections.abc import Sequence

from ..engine.generation import ChatMessage
from ..protocol.errors import LmspError
from ..protocol.items import (
    FunctionCall,
    FunctionCallOutput,
    InputItem,
    InputMessage,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
)
from .toolcalls import loads_or


def chat_messages(items: Sequence[InputItem]) -> list[ChatMessage]:
    """The conversation as chat turns; a tool output must answer an earlier call.

    Consecutive calls become one assistant turn with several ``tool_calls``. An MCP call the
    service ran is a call and its output; a denied one, a call and the denial (11.6).
    """
    messages: list[ChatMessage] = []
    call_ids: set[str] = set()
    asked = {item.id: item for item in items if isinstance(item, McpApprovalRequest)}
    for index, item in enumerate(items):
        if isinstance(item, InputMessage):
            messages.append(ChatMessage(role=item.role, content=item.text()))
        elif isinstance(item, FunctionCall):
            call_ids.add(item.call_id)
            _call(messages, item.call_id, item.name, item.arguments)
        elif isinstance(item, McpCall):
            call_id = item.id or item.approval_request_id or f"mcp_{index}"
            _call(messages, call_id, item.name, item.arguments)
            result = item.output if item.error is None else f"Error: {item.error}"
            messages.append(ChatMessage("tool", result or "", tool_call_id=call_id))
        elif isinstance(item, McpApprovalResponse) and not item.approve:
            denied = asked.get(item.approval_request_id)
            if denied is not None:
                _call(messages, denied.id, denied.name, denied.arguments)
                reason = f": {item.reason}" if item.reason else ""
                told = f"The user denied this call; it did not run{reason}"
                messages.append(ChatMessage("tool", told, tool_call_id=denied.id))
        elif isinstance(item, FunctionCallOutput):
            if item.call_id not in call_ids:
                raise LmspError(
                    "invalid_request",
                    f"function_call_output {item.call_id!r} matches no earlier function_call",
                    param=f"input[{index}].call_id",
                )
            messages.append(ChatMessage("tool", item.output, tool_call_id=item.call_id))
    return messages


def _call(messages: list[ChatMessage], call_id: str, name: str, arguments: str) -> None:
    """Add a call to the assistant's turn (a new turn unless the last one has calls)."""
    # templates expect the arguments as an object; text that is not JSON stays as it is
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": loads_or(arguments, arguments)},
    }
    last = messages[-1] if messages else None
    if last is not None and last.role == "assistant" and last.tool_calls:
        messages[-1] = ChatMessage("assistant", last.content, (*last.tool_calls, call))
    else:
        messages.append(ChatMessage("assistant", "", (call,)))
