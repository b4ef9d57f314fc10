"""Anthropic's Messages API requests (``/v1/messages``, ``/v1/messages/count_tokens``),
translated at the edge.

A Messages request becomes one :class:`ResponseRequest`: its system blocks a system message,
its text blocks messages, ``tool_use`` and ``tool_result`` blocks function calls and their
outputs. The answers are in :mod:`.anthropic_answers`. Lenient where Anthropic's clients send
more than is served (unknown fields, ``cache_control``, betas' additions are ignored), strict
on types; images and documents are refused. Pure data, no service.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import LmspError
from .items import (
    MAX_ITEMS,
    MAX_TEXT_CHARS,
    FunctionCall,
    FunctionCallOutput,
    InputItem,
    InputMessage,
)
from .models import ModelName
from .requests import (
    FunctionTool,
    NamedToolChoice,
    ResponseRequest,
    TopK,
    TopP,
    check_tool_choice,
    validate_request,
)

#: What Claude Code (2.1.36 and later) puts first in ``system``: a line that changes with every
#: request, so no prefix cache could serve the prompt after it. It is dropped.
BILLING_HEADER = "x-anthropic-billing-header:"


class _Lenient(BaseModel):
    """Fields not served are ignored (Anthropic's clients add betas' fields); types are checked."""

    model_config = ConfigDict(extra="ignore", strict=True)


class TextBlock(_Lenient):
    """``{"type": "text", "text": ...}`` (its ``cache_control`` and ``citations`` ignored)."""

    type: Literal["text"]
    text: str = Field(max_length=MAX_TEXT_CHARS)


class ImageBlock(_Lenient):
    """An image: parsed, then refused (no model here has vision)."""

    type: Literal["image"]


class DocumentBlock(_Lenient):
    """A document (a PDF, plain text with citations): parsed, then refused."""

    type: Literal["document"]


class ToolUseBlock(_Lenient):
    """A call the assistant made: its id, the tool and its input."""

    type: Literal["tool_use"]
    id: str = Field(min_length=1, max_length=255)
    name: str = Field(min_length=1, max_length=255)
    input: dict[str, Any]


class ToolResultBlock(_Lenient):
    """The output of a call (``is_error``: the tool failed)."""

    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1, max_length=255)
    content: (
        Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
        | Annotated[
            list[Annotated[TextBlock | ImageBlock | DocumentBlock, Field(discriminator="type")]],
            Field(max_length=MAX_ITEMS),
        ]
    ) = ""
    is_error: bool = False


class ThinkingBlock(_Lenient):
    """Thinking the assistant wrote: accepted back and not sent on."""

    type: Literal["thinking"]
    thinking: str = Field(max_length=MAX_TEXT_CHARS)
    signature: str | None = None


class RedactedThinkingBlock(_Lenient):
    """Redacted thinking: accepted back and not sent on."""

    type: Literal["redacted_thinking"]
    data: str = Field(max_length=MAX_TEXT_CHARS)


ContentBlock = Annotated[
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class MessageParam(_Lenient):
    """One message of ``messages``: a string or content blocks (a ``system`` one: text)."""

    role: Literal["user", "assistant", "system"]
    content: (
        Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
        | Annotated[list[ContentBlock], Field(max_length=MAX_ITEMS)]
    )


class Tool(_Lenient):
    """A client tool: its name, description and JSON Schema of its input."""

    type: Literal["custom"] | None = None
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    input_schema: dict[str, Any]


class ToolChoiceAuto(_Lenient):
    """The model decides whether to call a tool."""

    type: Literal["auto"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(_Lenient):
    """The model calls one of the tools (the decoder holds it to one)."""

    type: Literal["any"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(_Lenient):
    """The model calls this tool (the decoder holds it to it)."""

    type: Literal["tool"]
    name: str = Field(min_length=1, max_length=64)
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(_Lenient):
    """The model calls no tool."""

    type: Literal["none"]


ToolChoice = Annotated[
    ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone, Field(discriminator="type")
]


class ThinkingEnabled(_Lenient):
    """Thinking shown as ``thinking`` blocks (the budget is the model's own affair here);
    ``display: "omitted"``: not shown (other displays, ``summarized``, ``updates``, show it)."""

    type: Literal["enabled"]
    budget_tokens: int = Field(ge=1)
    display: str | None = Field(default=None, max_length=64)


class ThinkingAdaptive(_Lenient):
    """Thinking as the model sees fit: shown as ``thinking`` blocks unless omitted."""

    type: Literal["adaptive"]
    display: str | None = Field(default=None, max_length=64)


class ThinkingDisabled(_Lenient):
    """No ``thinking`` blocks (a model that reasons anyway has its reasoning left out)."""

    type: Literal["disabled"]


Thinking = Annotated[
    ThinkingEnabled | ThinkingAdaptive | ThinkingDisabled, Field(discriminator="type")
]

SystemPrompt = (
    Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
    | Annotated[list[TextBlock], Field(max_length=MAX_ITEMS)]
)


class AnthropicMetadata(_Lenient):
    """``metadata``: who the end user is (accepted and not kept)."""

    user_id: str | None = None


class CountTokensRequest(_Lenient):
    """``POST /v1/messages/count_tokens``: a prompt, counted in the model's own tokens."""

    model: ModelName
    messages: list[MessageParam] = Field(min_length=1, max_length=MAX_ITEMS)
    system: SystemPrompt | None = None
    tools: list[Tool] | None = Field(default=None, max_length=128)
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None


class MessagesRequest(CountTokensRequest):
    """``POST /v1/messages``."""

    max_tokens: int = Field(ge=1)
    stream: bool = False
    stop_sequences: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        default=None, max_length=4
    )
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: TopP | None = None
    top_k: TopK | None = None
    metadata: AnthropicMetadata | None = None
    service_tier: str | None = Field(default=None, max_length=64, description="Ignored.")

    @property
    def shows_thinking(self) -> bool:
        """Whether the answer has ``thinking`` blocks: thinking enabled or adaptive, and not
        omitted from display."""
        thinking = self.thinking
        if thinking is None or isinstance(thinking, ThinkingDisabled):
            return False
        return thinking.display != "omitted"


def messages_request(request: CountTokensRequest, model: str) -> ResponseRequest:
    """The response request that does what a Messages request asks, on ``model`` (a
    ``claude-*`` name the request gave is resolved by the service); a count_tokens request
    becomes the same prompt, with nothing to generate past it."""
    items = _system(request.system)
    for index, given in enumerate(request.messages):
        _add(items, given, index)
    choice, parallel = _tool_choice(request.tool_choice)
    fields: dict[str, Any] = {}
    if isinstance(request, MessagesRequest):
        fields = {
            "max_output_tokens": request.max_tokens,
            "stop": request.stop_sequences or None,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "top_k": request.top_k,
        }
    tools = [
        FunctionTool(
            type="function",
            name=tool.name,
            description=tool.description,
            parameters=tool.input_schema,
        )
        for tool in request.tools or []
    ]
    response_request = validate_request(
        ResponseRequest,
        {
            "model": model,
            "input": items,
            "tools": tools or None,
            "tool_choice": choice,
            "parallel_tool_calls": parallel,
            **fields,
        },
    )
    check_tool_choice(response_request)
    return response_request


def messages_param(param: str) -> str:
    """A field of the response request a Messages request became, as Anthropic names it."""
    if param == "max_output_tokens":
        return "max_tokens"
    if param == "stop":
        return "stop_sequences"
    if param.startswith("input"):
        return "messages"  # one message may have become several items
    return re.sub(r"^(tools\[\d+\])\.parameters", r"\1.input_schema", param)


def _system(system: SystemPrompt | None) -> list[InputItem]:
    """The system prompt as one system message, without Claude Code's billing line (which
    differs per request: kept, it would make every prompt new from its first tokens)."""
    if system is None:
        return []
    texts = [system] if isinstance(system, str) else [block.text for block in system]
    kept = [text for text in texts if not text.startswith(BILLING_HEADER)]
    return [InputMessage(role="system", content="\n\n".join(kept))] if kept else []


def _add(items: list[InputItem], message: MessageParam, index: int) -> None:
    """Add a message's blocks to ``items``: text to the message of its role before it (as
    Anthropic joins consecutive turns of one role), calls and their outputs as items. A
    system message after the first turn is the user's text: templates take one system
    message, first."""
    role = message.role
    if role == "system" and any(_role(item) != "system" for item in items):
        role = "user"
    blocks = (
        [TextBlock(type="text", text=message.content)]
        if isinstance(message.content, str)
        else message.content
    )
    for number, block in enumerate(blocks):
        param = f"messages[{index}].content[{number}]"
        if isinstance(block, TextBlock):
            _add_text(items, role, block.text)
        elif isinstance(block, ImageBlock | DocumentBlock):
            raise _refused(block, param)
        elif isinstance(block, ThinkingBlock | RedactedThinkingBlock):
            continue
        elif role == "system" or message.role == "system":
            raise LmspError("invalid_request", "a system message holds text only", param=param)
        else:
            items.append(_item(role, block, param))


def _role(item: InputItem) -> str | None:
    return item.role if isinstance(item, InputMessage) else None


def _add_text(
    items: list[InputItem], role: Literal["user", "assistant", "system"], text: str
) -> None:
    """``text`` at the end of the last item if it is a message of ``role``, else a message."""
    last = items[-1] if items else None
    if isinstance(last, InputMessage) and last.role == role:
        items[-1] = InputMessage(role=role, content=f"{last.text()}\n\n{text}")
    else:
        items.append(InputMessage(role=role, content=text))


def _item(
    role: Literal["user", "assistant"], block: ToolUseBlock | ToolResultBlock, param: str
) -> InputItem:
    if isinstance(block, ToolUseBlock):
        if role != "assistant":
            raise LmspError("invalid_request", "tool_use blocks are the assistant's", param=param)
        return FunctionCall(call_id=block.id, name=block.name, arguments=json.dumps(block.input))
    if role != "user":
        raise LmspError("invalid_request", "tool_result blocks are the user's", param=param)
    return FunctionCallOutput(
        type="function_call_output", call_id=block.tool_use_id, output=_result(block, param)
    )


def _result(block: ToolResultBlock, param: str) -> str:
    """A tool result's text; a failed call's says so first, as the model must know."""
    if isinstance(block.content, str):
        text = block.content
    else:
        for number, part in enumerate(block.content):
            if not isinstance(part, TextBlock):
                raise _refused(part, f"{param}.content[{number}]")
        text = "\n\n".join(part.text for part in block.content if isinstance(part, TextBlock))
    return f"Error: {text}" if block.is_error else text


def _refused(block: ImageBlock | DocumentBlock, param: str) -> LmspError:
    what = "images" if isinstance(block, ImageBlock) else "documents (PDFs among them)"
    return LmspError(
        "unsupported_capability",
        f"{what} are not supported: the models here read text only",
        param=f"{param}.type",
    )


def _tool_choice(
    choice: ToolChoice | None,
) -> tuple[Literal["auto", "none", "required"] | NamedToolChoice | None, bool | None]:
    """``tool_choice`` as LMSP's, and whether several calls may come (``None``: default)."""
    if choice is None:
        return None, None
    parallel = None
    if not isinstance(choice, ToolChoiceNone) and choice.disable_parallel_tool_use:
        parallel = False
    if isinstance(choice, ToolChoiceTool):
        return NamedToolChoice(type="function", name=choice.name), parallel
    names = {"auto": "auto", "any": "required", "none": "none"}
    return names[choice.type], parallel  # type: ignore[return-value]
