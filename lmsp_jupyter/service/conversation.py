"""From LMSP input items to the chat messages a template renders."""

from __future__ import annotations

from collections.abc import Sequence

from ..engine.generation import ChatMessage
from ..protocol.errors import LmspError
from ..protocol.items import FunctionCall, FunctionCallOutput, InputItem, InputMessage
from .toolcalls import loads_or


def chat_messages(items: Sequence[InputItem]) -> list[ChatMessage]:
    """The conversation as chat turns; a tool output must answer an earlier call.

    Consecutive calls become one assistant turn with several ``tool_calls``.
    """
    messages: list[ChatMessage] = []
    call_ids: set[str] = set()
    for index, item in enumerate(items):
        if isinstance(item, InputMessage):
            messages.append(ChatMessage(role=item.role, content=item.text()))
        elif isinstance(item, FunctionCall):
            call_ids.add(item.call_id)
            # templates expect the arguments as an object; text that is not JSON stays as it is
            arguments = loads_or(item.arguments, item.arguments)
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": arguments},
            }
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant" and last.tool_calls:
                messages[-1] = ChatMessage("assistant", last.content, (*last.tool_calls, call))
            else:
                messages.append(ChatMessage("assistant", "", (call,)))
        elif isinstance(item, FunctionCallOutput):
            if item.call_id not in call_ids:
                raise LmspError(
                    "invalid_request",
                    f"function_call_output {item.call_id!r} matches no earlier function_call",
                    param=f"input[{index}].call_id",
                )
            messages.append(ChatMessage("tool", item.output, tool_call_id=item.call_id))
    return messages
