"""OpenAI's (legacy) Completions (LMSP 1.0 section 11.5), translated at the edge.

A completion request becomes one :class:`ResponseRequest` (the model and the sampling) and a raw
prompt: the ``prompt`` continued as it is, or with a ``suffix`` the gap between them filled in.
Its answers are a ``text_completion`` object, or ``text_completion`` chunks. Pure data.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .chat import StreamOptions
from .chat_answers import ChatStreamDone, ChatStreamError, ChatUsage, chat_usage, closing_frames
from .errors import LmspError
from .events import (
    EventData,
    OutputTextDelta,
    ResponseEvent,
)
from .items import MAX_TEXT_CHARS, InputMessage, OutputMessage
from .requests import SAMPLING_FIELDS, MinP, ResponseRequest, Seed, Stop, Temperature, TopK, TopP
from .responses import Response, Usage

#: Output tokens when a request gives no ``max_tokens``: OpenAI's default for Completions.
DEFAULT_MAX_TOKENS = 16

PromptText = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class CompletionRequest(BaseModel):
    """``POST /lmsp/v1/completions``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str = Field(min_length=1, max_length=512)
    prompt: PromptText | Annotated[list[PromptText], Field(min_length=1, max_length=1)] = Field(
        description="The text to continue (a list of one text is taken too)."
    )
    suffix: PromptText | None = Field(
        default=None,
        description="The text after the gap: filled in between when the model has the `fim` "
        "capability, else left out.",
    )
    max_tokens: int | None = Field(default=DEFAULT_MAX_TOKENS, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    seed: Seed | None = None
    stop: Stop | None = None
    n: int | None = Field(default=None, description="Only 1.")
    best_of: int | None = Field(default=None, description="Only 1.")
    echo: bool | None = Field(default=None, description="Only `false`.")
    logprobs: int | None = Field(default=None, description="Not served: only `null`.")
    # Accepted and ignored.
    user: str | None = Field(default=None, max_length=512)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)

    @property
    def text(self) -> str:
        """The prompt's text."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


def as_response_request(completion: CompletionRequest) -> ResponseRequest:
    """The response request of ``completion``'s model and sampling (its prompt goes raw)."""
    for param, value, allowed in (
        ("n", completion.n, (None, 1)),
        ("best_of", completion.best_of, (None, 1)),
        ("echo", completion.echo, (None, False)),
        ("logprobs", completion.logprobs, (None,)),
    ):
        if value not in allowed:
            served = " or ".join(str(a).lower() for a in allowed if a is not None) or "null"
            raise LmspError("invalid_request", f"only {param} = {served} is served", param=param)
    return ResponseRequest(
        model=completion.model,
        input=[InputMessage(role="user", content=completion.text)],
        max_output_tokens=completion.max_tokens,
        **completion.model_dump(include=SAMPLING_FIELDS),
    )


def completion_param(param: str | None) -> str | None:
    """A field of the response request a completion became, named as the completion names it."""
    if param == "max_output_tokens":
        return "max_tokens"
    if param is not None and param.startswith("input"):
        return "prompt"
    return param


class CompletionChoice(BaseModel):
    """The one choice of a ``text_completion`` (or of one of its chunks)."""

    text: str
    index: int = 0
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None


class TextCompletion(BaseModel):
    """``text_completion``: the answer to a completion request, or one chunk of it streamed."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: ChatUsage | None = None
    system_fingerprint: None = None


#: What a completion stream sends: chunks, then ``[DONE]``, or an error and ``[DONE]``.
CompletionStreamFrame = TextCompletion | ChatStreamError | ChatStreamDone


def _finish_reason(status: str) -> Literal["stop", "length"]:
    return "length" if status == "incomplete" else "stop"


def text_completion(response: Response) -> TextCompletion:
    """A final response as a ``text_completion``."""
    text = "".join(
        part.text
        for item in response.output
        if isinstance(item, OutputMessage)
        for part in item.content
    )
    return _object(
        response,
        [CompletionChoice(text=text, finish_reason=_finish_reason(response.status))],
        response.usage,
    )


def _object(
    response: Response, choices: list[CompletionChoice], usage: Usage | None
) -> TextCompletion:
    return TextCompletion(
        id=response.id,
        created=response.created_at,
        model=response.model,
        choices=choices,
        usage=None if usage is None else chat_usage(usage),
    )


class CompletionChunks:
    """Turns a response's events into ``text_completion`` chunks, the usage last if asked for."""

    def __init__(self, response: Response, *, include_usage: bool) -> None:
        self.response = response
        self.include_usage = include_usage

    def feed(self, event: ResponseEvent) -> list[CompletionStreamFrame]:
        """The chunks of ``event`` (none for events that add no text)."""
        return self._of(event.data)

    def _chunk(self, text: str, finish_reason: Literal["stop", "length"] | None) -> TextCompletion:
        return _object(
            self.response, [CompletionChoice(text=text, finish_reason=finish_reason)], None
        )

    def _of(self, data: EventData) -> list[CompletionStreamFrame]:
        if isinstance(data, OutputTextDelta):
            return [self._chunk(data.delta, None)]
        return closing_frames(
            data,
            lambda status: self._chunk("", _finish_reason(status)),
            lambda usage: _object(self.response, [], usage),
            include_usage=self.include_usage,
        )
