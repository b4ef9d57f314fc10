"""From LMSP input items to the chat messages a template renders."""

from __future__ import annotations

from collections.abc import Sequence

from ..engine.generation import ChatMessage
from ..protocol.errors import LmspError
from ..protocol.items import FunctionCall, FunctionCallOutput, InputItem, InputMessage


def chat_messages(items: Sequence[InputItem]) -> list[ChatMessage]:
    """The conversation as chat turns; a tool output must answer an earlier call."""
    messages: list[ChatMessage] = []
    call_ids: set[str] = set()
    for index, item in enumerate(items):
        if isinstance(item, InputMessage):
            messages.append(ChatMessage(role=item.role, content=item.text()))
        elif isinstance(item, FunctionCall):
            call_ids.add(item.call_id)
            messages.append(ChatMessage(role="assistant", content=f"{item.name}({item.arguments})"))
        elif isinstance(item, FunctionCallOutput):
            if item.call_id not in call_ids:
                raise LmspError(
                    "invalid_request",
                    f"function_call_output {item.call_id!r} matches no earlier function_call",
                    param=f"input[{index}].call_id",
                )
            messages.append(ChatMessage(role="tool", content=item.output))
    return messages
