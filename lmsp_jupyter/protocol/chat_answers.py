"""OpenAI's Chat Completions answers (LMSP 1.0 section 11.3): a final response as a
``chat.completion``, a response's events as ``chat.completion.chunk`` objects. Pure data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from .chat import ChatFunctionCall, ChatToolCall
from .events import (
    EndedWithError,
    EndedWithResponse,
    EventData,
    FunctionCallArgumentsDelta,
    OutputItemAdded,
    OutputTextDelta,
    ReasoningSummaryTextDelta,
    ResponseEvent,
)
from .items import OutputFunctionCall, OutputMessage, OutputReasoning
from .logprobs import Logprob
from .models import EXTENSION_KEY
from .prediction import UsageExtension
from .responses import Response, Usage

Choice = TypeVar("Choice", bound=BaseModel)


class ChatUsage(BaseModel):
    """Token counts, in the model's own tokens."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int]
    completion_tokens_details: dict[str, int]


class ChatAnswer(BaseModel):
    """The assistant's message of a ``chat.completion``."""

    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None
    tool_calls: list[ChatToolCall] | None = None
    reasoning_content: str | None = None


class ChatLogprobs(BaseModel):
    """A choice's logprobs (``logprobs: true``): one entry per token of the content."""

    content: list[Logprob] | None
    refusal: None = None


class ChatChoice(BaseModel):
    """The one choice of a ``chat.completion``."""

    index: int = 0
    message: ChatAnswer
    finish_reason: Literal["stop", "length", "tool_calls"]
    logprobs: ChatLogprobs | None = None


class _ChatObject(BaseModel, Generic[Choice]):
    """What a ``chat.completion`` and its chunks have alike, in OpenAI's order: the
    subclasses name their ``object`` (and a completion always carries ``usage``)."""

    id: str
    object: str
    created: int
    model: str
    choices: list[Choice]
    usage: ChatUsage | None = None
    system_fingerprint: None = None


class ChatCompletion(_ChatObject[ChatChoice]):
    """``chat.completion``: the answer to a chat request."""

    object: Literal["chat.completion"] = "chat.completion"
    usage: ChatUsage | None


class ChunkDelta(BaseModel):
    """What one chunk adds to the message."""

    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChunkChoice(BaseModel):
    """The one choice of a chunk."""

    index: int = 0
    delta: ChunkDelta
    finish_reason: Literal["stop", "length", "tool_calls"] | None = None
    logprobs: ChatLogprobs | None = None


class ChatCompletionChunk(_ChatObject[ChunkChoice]):
    """``chat.completion.chunk``: one piece of a streamed answer."""

    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"


class ChatStreamError(BaseModel):
    """A problem that ends a chat stream: ``{"error": <problem>}``."""

    error: dict[str, Any]


class ChatStreamDone(BaseModel):
    """The end of a chat stream: ``data: [DONE]``."""


#: What a chat stream sends: chunks, then ``[DONE]``, or an error and ``[DONE]``.
ChatStreamFrame = ChatCompletionChunk | ChatStreamError | ChatStreamDone


def chat_usage(usage: Usage) -> ChatUsage:
    """Usage in Chat Completions' words (with OpenAI's counts of predicted tokens)."""
    own = (usage.extensions or {}).get(EXTENSION_KEY, UsageExtension())
    return ChatUsage(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        prompt_tokens_details={"cached_tokens": usage.input_tokens_details.cached_tokens},
        completion_tokens_details={
            "reasoning_tokens": usage.output_tokens_details.reasoning_tokens,
            "accepted_prediction_tokens": own.accepted_prediction_tokens,
            "rejected_prediction_tokens": own.rejected_prediction_tokens,
        },
    )


def _finish_reason(status: str, calls: bool) -> Literal["stop", "length", "tool_calls"]:
    if status == "incomplete":
        return "length"
    return "tool_calls" if calls else "stop"


def chat_completion(response: Response) -> ChatCompletion:
    """A final response as a ``chat.completion``."""
    parts = [
        part for item in response.output if isinstance(item, OutputMessage) for part in item.content
    ]
    texts = [part.text for part in parts]
    reasoning = [
        part.text
        for item in response.output
        if isinstance(item, OutputReasoning)
        for part in item.summary
    ]
    logprobs = [part.logprobs for part in parts if part.logprobs is not None]
    calls = [
        ChatToolCall(
            id=item.call_id, function=ChatFunctionCall(name=item.name, arguments=item.arguments)
        )
        for item in response.output
        if isinstance(item, OutputFunctionCall)
    ]
    answer = ChatAnswer(
        content="".join(texts) if texts else None,
        tool_calls=calls or None,
        reasoning_content="".join(reasoning) if reasoning else None,
    )
    return ChatCompletion(
        id=response.id,
        created=response.created_at,
        model=response.model,
        choices=[
            ChatChoice(
                message=answer,
                finish_reason=_finish_reason(response.status, bool(calls)),
                logprobs=ChatLogprobs(content=[lp for part in logprobs for lp in part])
                if logprobs
                else None,
            )
        ],
        usage=chat_usage(response.usage) if response.usage is not None else None,
    )


class ChunkTranslator:
    """Turns a response's events into chunks, one choice, the usage last if asked for."""

    def __init__(self, response: Response, *, include_usage: bool) -> None:
        self.response = response
        self.include_usage = include_usage
        self._calls: dict[str, int] = {}  # function call item id → its tool_calls index

    def _chunk(
        self,
        delta: ChunkDelta | None,
        finish_reason: Any = None,
        usage: Usage | None = None,
        logprobs: list[Logprob] | None = None,
    ) -> ChatCompletionChunk:
        """A chunk of the response: one choice adding ``delta`` (and the logprobs of its
        tokens), or none (the usage alone)."""
        choices = (
            []
            if delta is None
            else [
                ChunkChoice(
                    delta=delta,
                    finish_reason=finish_reason,
                    logprobs=None if logprobs is None else ChatLogprobs(content=logprobs),
                )
            ]
        )
        return ChatCompletionChunk(
            id=self.response.id,
            created=self.response.created_at,
            model=self.response.model,
            choices=choices,
            usage=None if usage is None else chat_usage(usage),
        )

    def first(self) -> ChatCompletionChunk:
        """The chunk that opens the stream: the assistant's role."""
        return self._chunk(ChunkDelta(role="assistant", content=""))

    def feed(self, event: ResponseEvent) -> list[ChatStreamFrame]:
        """The chunks of ``event`` (none for events that add nothing to the message)."""
        return self._of(event.data)

    def _of(self, data: EventData) -> list[ChatStreamFrame]:
        if isinstance(data, OutputTextDelta):
            return [self._chunk(ChunkDelta(content=data.delta), logprobs=data.logprobs)]
        if isinstance(data, ReasoningSummaryTextDelta):
            return [self._chunk(ChunkDelta(reasoning_content=data.delta))]
        if isinstance(data, OutputItemAdded) and isinstance(data.item, OutputFunctionCall):
            index = self._calls[data.item.id] = len(self._calls)
            call = {
                "index": index,
                "id": data.item.call_id,
                "type": "function",
                "function": {"name": data.item.name, "arguments": ""},
            }
            return [self._chunk(ChunkDelta(tool_calls=[call]))]
        if isinstance(data, FunctionCallArgumentsDelta):
            call = {"index": self._calls[data.item_id], "function": {"arguments": data.delta}}
            return [self._chunk(ChunkDelta(tool_calls=[call]))]
        return closing_frames(
            data,
            lambda status: self._chunk(ChunkDelta(), _finish_reason(status, bool(self._calls))),
            lambda usage: self._chunk(None, usage=usage),
            include_usage=self.include_usage,
        )


Frame = TypeVar("Frame", bound=BaseModel)


def closing_frames(
    data: EventData,
    last: Callable[[str], Frame],
    usage_only: Callable[[Usage], Frame],
    *,
    include_usage: bool,
) -> list[Frame | ChatStreamError | ChatStreamDone]:
    """The frames an OpenAI-style stream ends with at ``data``: the ``last`` chunk (given the
    final status), the usage alone if asked for, and ``[DONE]``; an error and ``[DONE]`` for a
    failure; none for an event that does not end it."""
    if isinstance(data, EndedWithResponse):
        frames: list[Frame | ChatStreamError | ChatStreamDone] = [last(data.status)]
        usage = getattr(data, "usage", None)
        if include_usage and usage is not None:
            frames.append(usage_only(usage))
        return [*frames, ChatStreamDone()]
    if isinstance(data, EndedWithError):
        return [ChatStreamError(error=data.error.model_dump(exclude_none=True)), ChatStreamDone()]
    return []
