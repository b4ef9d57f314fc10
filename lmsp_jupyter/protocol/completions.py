"""OpenAI's (legacy) Completions (LMSP 1.0 section 11.5), translated at the edge.

A completion request becomes one :class:`ResponseRequest` (the model and the sampling) and a raw
prompt: the ``prompt`` continued as it is, or with a ``suffix`` the gap between them filled in.
Its answers are a ``text_completion`` object, or ``text_completion`` chunks. Pure data.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .chat import Prediction, StreamOptions, prediction_extensions, unextended_param
from .chat_answers import ChatStreamDone, ChatStreamError, ChatUsage, chat_usage, closing_frames
from .errors import LmspError
from .events import (
    EventData,
    OutputTextDelta,
    ResponseEvent,
)
from .items import MAX_TEXT_CHARS, InputMessage, OutputMessage
from .logprobs import LOGPROBS_INCLUDE, Logprob
from .models import ModelName
from .requests import (
    ResponseRequest,
    SamplingFields,
)
from .responses import Response, Usage

#: Output tokens when a request gives no ``max_tokens``: OpenAI's default for Completions.
DEFAULT_MAX_TOKENS = 16
#: The most alternatives ``logprobs`` may ask for per token (OpenAI's bound for Completions).
MAX_LOGPROBS = 5

PromptText = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class CompletionRequest(SamplingFields):
    """``POST /lmsp/v1/completions``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: ModelName
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
    n: int | None = Field(default=None, description="Only 1.")
    best_of: int | None = Field(default=None, description="Only 1.")
    echo: bool | None = Field(default=None, description="Only `false`.")
    logprobs: int | None = Field(
        default=None,
        ge=0,
        le=MAX_LOGPROBS,
        description="The logprob of each output token, with this many most likely alternatives.",
    )
    # Accepted and ignored.
    prediction: Prediction | None = Field(
        default=None,
        description="The text as expected, mostly (as Chat Completions' `prediction`): "
        "verified, never copied.",
    )
    user: str | None = Field(default=None, max_length=512)

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
    ):
        if value not in allowed:
            served = " or ".join(str(a).lower() for a in allowed if a is not None)
            raise LmspError("invalid_request", f"only {param} = {served} is served", param=param)
    return ResponseRequest(
        model=completion.model,
        input=[InputMessage(role="user", content=completion.text)],
        max_output_tokens=completion.max_tokens,
        include=None if completion.logprobs is None else [LOGPROBS_INCLUDE],
        top_logprobs=completion.logprobs,
        extensions=prediction_extensions(completion.prediction),
        **completion.sampling(),
    )


def completion_param(param: str) -> str:
    """A field of the response request a completion became, named as the completion names it."""
    if param == "max_output_tokens":
        return "max_tokens"
    if param.startswith("input"):
        return "prompt"
    return unextended_param(param)


class CompletionLogprobs(BaseModel):
    """A choice's logprobs in Completions' shape (``logprobs: n``): one entry per output token
    in each list, and ``text_offset`` the token's first character in the prompt followed by
    the text."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


def completion_logprobs(logprobs: list[Logprob], start: int) -> CompletionLogprobs:
    """``logprobs`` in Completions' shape, the first token at character ``start``."""
    offsets = []
    for entry in logprobs:
        offsets.append(start)
        start += len(entry.token)
    return CompletionLogprobs(
        tokens=[entry.token for entry in logprobs],
        token_logprobs=[entry.logprob for entry in logprobs],
        top_logprobs=[_alternatives(entry) for entry in logprobs],
        text_offset=offsets,
    )


def _alternatives(entry: Logprob) -> dict[str, float]:
    """The alternatives at ``entry``'s position, the most likely first; of two spelled alike
    the more likely one."""
    alternatives: dict[str, float] = {}
    for top in entry.top_logprobs:
        alternatives.setdefault(top.token, top.logprob)
    return alternatives


class CompletionChoice(BaseModel):
    """The one choice of a ``text_completion`` (or of one of its chunks)."""

    text: str
    index: int = 0
    logprobs: CompletionLogprobs | None = None
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


def text_completion(response: Response, prompt_chars: int) -> TextCompletion:
    """A final response as a ``text_completion``, continuing a prompt of ``prompt_chars``
    characters (where the logprobs' ``text_offset`` starts)."""
    parts = [
        part for item in response.output if isinstance(item, OutputMessage) for part in item.content
    ]
    logprobs = [part.logprobs for part in parts if part.logprobs is not None]
    choice = CompletionChoice(
        text="".join(part.text for part in parts),
        finish_reason=_finish_reason(response.status),
        logprobs=completion_logprobs([lp for part in logprobs for lp in part], prompt_chars)
        if logprobs
        else None,
    )
    return _object(response, [choice], response.usage)


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

    def __init__(self, response: Response, *, include_usage: bool, prompt_chars: int) -> None:
        self.response = response
        self.include_usage = include_usage
        self._offset = prompt_chars  # the next token's ``text_offset``

    def feed(self, event: ResponseEvent) -> list[CompletionStreamFrame]:
        """The chunks of ``event`` (none for events that add no text)."""
        return self._of(event.data)

    def _chunk(
        self,
        text: str,
        finish_reason: Literal["stop", "length"] | None,
        logprobs: CompletionLogprobs | None = None,
    ) -> TextCompletion:
        choice = CompletionChoice(text=text, finish_reason=finish_reason, logprobs=logprobs)
        return _object(self.response, [choice], None)

    def _of(self, data: EventData) -> list[CompletionStreamFrame]:
        if isinstance(data, OutputTextDelta):
            if data.logprobs is None:
                return [self._chunk(data.delta, None)]
            logprobs = completion_logprobs(data.logprobs, self._offset)
            self._offset += sum(len(entry.token) for entry in data.logprobs)
            return [self._chunk(data.delta, None, logprobs)]
        return closing_frames(
            data,
            lambda status: self._chunk("", _finish_reason(status)),
            lambda usage: _object(self.response, [], usage),
            include_usage=self.include_usage,
        )
