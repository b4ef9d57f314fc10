"""Anthropic's Messages API answers: a final response as a ``message``, a response's events as
Anthropic's stream events, token counts, model listings and errors. Pure data."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from .errors import Problem
from .events import (
    EndedWithError,
    EndedWithResponse,
    EventData,
    FunctionCallArgumentsDelta,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    ReasoningSummaryTextDelta,
    ResponseEvent,
)
from .items import OutputFunctionCall, OutputItem, OutputMessage, OutputReasoning
from .responses import Response, Usage

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]
ErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "overloaded_error",
]

#: Anthropic's error type of each LMSP status; another 4xx status is an invalid request.
_ERROR_TYPES: dict[int, ErrorType] = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}
#: The LMSP codes that mean "try again later": Anthropic's ``overloaded_error``.
_OVERLOADED = frozenset({"overloaded", "engine_unavailable", "model_busy"})
#: The status Anthropic answers ``overloaded_error`` with.
OVERLOADED_STATUS = 529


class ErrorDetail(BaseModel):
    """What went wrong: its type and a message."""

    type: ErrorType
    message: str


class AnthropicError(BaseModel):
    """Every error: ``{"type": "error", "error": {...}}``, as a reply or a stream's event."""

    type: Literal["error"] = "error"
    error: ErrorDetail


def anthropic_error(
    status: int, code: str, message: str, param: str | None = None
) -> tuple[int, AnthropicError]:
    """An LMSP error (its status, code, message and the field at fault) as Anthropic's
    status and error, whose message names the field first, as Anthropic's do."""
    if param and not message.startswith(param):
        message = f"{param}: {message}"
    if code in _OVERLOADED:
        status, kind = OVERLOADED_STATUS, "overloaded_error"
    elif status >= 500:
        status, kind = 500, "api_error"
    else:
        kind = _ERROR_TYPES.get(status, "invalid_request_error")
    return status, AnthropicError(error=ErrorDetail(type=kind, message=message))


def problem_error(problem: Problem) -> AnthropicError:
    """A problem that ended a stream, as the stream's ``error`` event."""
    message = problem.detail or problem.title
    return anthropic_error(problem.status, problem.code, message, problem.param)[1]


class AnthropicUsage(BaseModel):
    """Token counts: ``input_tokens`` are those not read from the prefix cache."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


def anthropic_usage(usage: Usage | None) -> AnthropicUsage:
    """LMSP's usage in Anthropic's words."""
    if usage is None:
        return AnthropicUsage(input_tokens=0, output_tokens=0)
    cached = usage.input_tokens_details.cached_tokens
    return AnthropicUsage(
        input_tokens=usage.input_tokens - cached,
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=cached,
    )


class TextContent(BaseModel):
    """A text block of the answer."""

    type: Literal["text"] = "text"
    text: str


class ThinkingContent(BaseModel):
    """The model's reasoning (``thinking`` enabled or adaptive); it has no signature here."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class ToolUseContent(BaseModel):
    """A call of a client tool."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


Content = Annotated[TextContent | ThinkingContent | ToolUseContent, Field(discriminator="type")]


class Message(BaseModel):
    """``message``: the answer (whole, or as it starts in ``message_start``)."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[Content]
    stop_reason: StopReason | None = None
    stop_sequence: str | None = None
    usage: AnthropicUsage


class TokenCount(BaseModel):
    """``POST /v1/messages/count_tokens``."""

    input_tokens: int


class AnthropicModel(BaseModel):
    """A model as ``GET /v1/models`` lists it."""

    type: Literal["model"] = "model"
    id: str
    display_name: str
    created_at: str


class AnthropicModelList(BaseModel):
    """``GET /v1/models``: every model, in one page."""

    data: list[AnthropicModel]
    has_more: bool = False
    first_id: str | None
    last_id: str | None


def anthropic_model(model_id: str, display_name: str, created: int) -> AnthropicModel:
    """A model, its ``created`` time (Unix seconds) as Anthropic writes it."""
    created_at = datetime.fromtimestamp(created, UTC).isoformat().replace("+00:00", "Z")
    return AnthropicModel(id=model_id, display_name=display_name, created_at=created_at)


def model_list(models: list[AnthropicModel]) -> AnthropicModelList:
    """A list of models, as one page."""
    return AnthropicModelList(
        data=models,
        first_id=models[0].id if models else None,
        last_id=models[-1].id if models else None,
    )


class MessageStart(BaseModel):
    """``message_start``: the message, with no content yet."""

    type: Literal["message_start"] = "message_start"
    message: Message


class Ping(BaseModel):
    """``ping``: nothing yet, the stream lives."""

    type: Literal["ping"] = "ping"


class ContentBlockStart(BaseModel):
    """``content_block_start``: a block begins (a text, a thinking, a call with no input)."""

    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: Content


class TextDelta(BaseModel):
    """Text appended to a text block."""

    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDelta(BaseModel):
    """Text appended to a thinking block."""

    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class InputJsonDelta(BaseModel):
    """JSON text appended to a call's input."""

    type: Literal["input_json_delta"] = "input_json_delta"
    partial_json: str


class ContentBlockDelta(BaseModel):
    """``content_block_delta``: a piece of a block."""

    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: TextDelta | ThinkingDelta | InputJsonDelta


class ContentBlockStop(BaseModel):
    """``content_block_stop``: a block is complete."""

    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class MessageDeltaBody(BaseModel):
    """Why the message ended."""

    stop_reason: StopReason
    stop_sequence: str | None = None


class MessageDelta(BaseModel):
    """``message_delta``: the stop reason and the final usage."""

    type: Literal["message_delta"] = "message_delta"
    delta: MessageDeltaBody
    usage: AnthropicUsage


class MessageStop(BaseModel):
    """``message_stop``: the end of the stream."""

    type: Literal["message_stop"] = "message_stop"


#: What a Messages stream sends (each framed as an SSE event named by its ``type``).
AnthropicStreamEvent = (
    MessageStart
    | Ping
    | ContentBlockStart
    | ContentBlockDelta
    | ContentBlockStop
    | MessageDelta
    | MessageStop
    | AnthropicError
)


def stop_reason(response: Response) -> StopReason:
    """Why ``response`` ended, in Anthropic's words (a stop sequence reads as ``end_turn``:
    the engine does not say which stop ended the text)."""
    if response.status == "incomplete":
        return "max_tokens"
    if any(isinstance(item, OutputFunctionCall) for item in response.output):
        return "tool_use"
    return "end_turn"


def _arguments(item: OutputFunctionCall) -> dict[str, Any]:
    """A call's arguments as an object (the decoder holds them to their schema's JSON)."""
    try:
        arguments = json.loads(item.arguments)
    except ValueError:
        return {}
    return arguments if isinstance(arguments, dict) else {}


def _content(item: OutputItem) -> Content:
    if isinstance(item, OutputMessage):
        return TextContent(text="".join(part.text for part in item.content))
    if isinstance(item, OutputReasoning):
        return ThinkingContent(thinking="".join(part.text for part in item.summary))
    assert isinstance(item, OutputFunctionCall)  # the Messages API offers no MCP tools
    return ToolUseContent(id=item.call_id, name=item.name, input=_arguments(item))


def _started(item: OutputItem) -> Content:
    """The block of ``item`` as it starts: empty, its text and input to come in pieces."""
    if isinstance(item, OutputMessage):
        return TextContent(text="")
    if isinstance(item, OutputReasoning):
        return ThinkingContent(thinking="")
    assert isinstance(item, OutputFunctionCall)  # the Messages API offers no MCP tools
    return ToolUseContent(id=item.call_id, name=item.name, input={})


def message(response: Response, model: str, *, thinking: bool) -> Message:
    """A final response as Anthropic's ``message`` on ``model`` (the name the client asked
    for); reasoning as ``thinking`` blocks if ``thinking``, else left out."""
    content = [
        _content(item)
        for item in response.output
        if thinking or not isinstance(item, OutputReasoning)
    ]
    return Message(
        id=response.id,
        model=model,
        content=content,
        stop_reason=stop_reason(response),
        usage=anthropic_usage(response.usage),
    )


class MessageStream:
    """Turns a response's events into Anthropic's stream events: each output item a content
    block (reasoning only if ``thinking``), a call's input as JSON pieces."""

    def __init__(self, response: Response, model: str, *, thinking: bool) -> None:
        self.response = response
        self.model = model
        self.thinking = thinking
        self._blocks: dict[str, int] = {}  # item id → its block's index

    def first(self, input_tokens: int) -> list[AnthropicStreamEvent]:
        """What opens the stream: ``message_start`` (the prompt's tokens), then a ``ping``."""
        start = Message(
            id=self.response.id,
            model=self.model,
            content=[],
            usage=AnthropicUsage(input_tokens=input_tokens, output_tokens=0),
        )
        return [MessageStart(message=start), Ping()]

    def feed(self, event: ResponseEvent) -> list[AnthropicStreamEvent]:
        """The stream events of ``event`` (none for events that add nothing)."""
        return self._of(event.data)

    def _of(self, data: EventData) -> list[AnthropicStreamEvent]:
        if isinstance(data, OutputItemAdded) and self._shown(data.item):
            index = self._blocks[data.item.id] = len(self._blocks)
            return [ContentBlockStart(index=index, content_block=_started(data.item))]
        if isinstance(data, OutputTextDelta):
            return self._delta(data.item_id, TextDelta(text=data.delta))
        if isinstance(data, ReasoningSummaryTextDelta):
            return self._delta(data.item_id, ThinkingDelta(thinking=data.delta))
        if isinstance(data, FunctionCallArgumentsDelta):
            return self._delta(data.item_id, InputJsonDelta(partial_json=data.delta))
        if isinstance(data, OutputItemDone) and data.item.id in self._blocks:
            return [ContentBlockStop(index=self._blocks[data.item.id])]
        if isinstance(data, EndedWithResponse):
            body = MessageDeltaBody(stop_reason=stop_reason(data.response))
            usage = anthropic_usage(data.response.usage)
            return [MessageDelta(delta=body, usage=usage), MessageStop()]
        if isinstance(data, EndedWithError):
            return [problem_error(data.error)]
        return []

    def _shown(self, item: OutputItem) -> bool:
        return self.thinking or not isinstance(item, OutputReasoning)

    def _delta(
        self, item_id: str, delta: TextDelta | ThinkingDelta | InputJsonDelta
    ) -> list[AnthropicStreamEvent]:
        index = self._blocks.get(item_id)
        return [] if index is None else [ContentBlockDelta(index=index, delta=delta)]
