"""Ollama's API answers: model listings, and a response's events as ``/api/chat`` and
``/api/generate`` chunks (NDJSON lines when streamed). Pure data; the clock is passed in."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from .events import (
    EndedWithError,
    EndedWithResponse,
    EventData,
    OutputItemDone,
    OutputTextDelta,
    ReasoningSummaryTextDelta,
    ResponseEvent,
)
from .items import OutputFunctionCall, OutputMessage, OutputReasoning
from .responses import Response

#: What a model can do, in Ollama's words (``/api/show``).
OllamaCapability = Literal["completion", "tools", "insert", "embedding", "thinking", "vision"]


class OllamaError(BaseModel):
    """Every Ollama error: ``{"error": "..."}``, as a reply or as a stream's last line."""

    error: str


class OllamaVersion(BaseModel):
    """``GET /api/version``."""

    version: str


class OllamaModelDetails(BaseModel):
    """``details`` of a listed or shown model."""

    parent_model: str = ""
    format: str = "gguf"
    family: str
    families: list[str]
    parameter_size: str = ""
    quantization_level: str = ""


class OllamaListedModel(BaseModel):
    """One model of ``GET /api/tags``."""

    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: OllamaModelDetails


class OllamaModelList(BaseModel):
    """``GET /api/tags``."""

    models: list[OllamaListedModel]


class OllamaRunningModel(BaseModel):
    """One model of ``GET /api/ps``: a loaded one."""

    name: str
    model: str
    size: int
    digest: str
    details: OllamaModelDetails
    expires_at: str
    size_vram: int = 0
    context_length: int


class OllamaRunningList(BaseModel):
    """``GET /api/ps``."""

    models: list[OllamaRunningModel]


class OllamaShow(BaseModel):
    """``POST /api/show``."""

    modelfile: str = ""
    parameters: str = ""
    template: str = ""
    license: str = ""
    details: OllamaModelDetails
    model_info: dict[str, Any]
    capabilities: list[OllamaCapability]
    modified_at: str


class OllamaEmbedResponse(BaseModel):
    """``POST /api/embed``: a normalized vector per text."""

    model: str
    embeddings: list[list[float]]
    total_duration: int
    load_duration: int = 0
    prompt_eval_count: int


class OllamaEmbeddingResponse(BaseModel):
    """``POST /api/embeddings``: the prompt's vector."""

    embedding: list[float]


class OllamaFunctionCall(BaseModel):
    """A call the model made: its arguments as an object."""

    index: int
    name: str
    arguments: dict[str, Any]


class OllamaToolCall(BaseModel):
    """One entry of an answer's ``tool_calls``."""

    id: str
    function: OllamaFunctionCall


class OllamaAnswerMessage(BaseModel):
    """The assistant's message of a chat chunk (its piece of it while streaming)."""

    role: Literal["assistant"] = "assistant"
    content: str = ""
    thinking: str | None = None
    tool_calls: list[OllamaToolCall] | None = None


class OllamaTimings(BaseModel):
    """The final chunk's figures: token counts, durations in nanoseconds."""

    total_duration: int
    load_duration: int
    prompt_eval_count: int
    prompt_eval_duration: int
    eval_count: int
    eval_duration: int


class _Chunk(BaseModel):
    model: str
    created_at: str
    done: bool = False
    done_reason: Literal["stop", "length", "load", "unload"] | None = None
    # the final chunk's figures (``OllamaTimings``), flat as Ollama sends them
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class OllamaChatChunk(_Chunk):
    """An ``/api/chat`` answer, or one piece of it."""

    message: OllamaAnswerMessage


class OllamaGenerateChunk(_Chunk):
    """An ``/api/generate`` answer, or one piece of it."""

    response: str = ""
    thinking: str | None = None


OllamaChunk = OllamaChatChunk | OllamaGenerateChunk | OllamaError


def timestamp(unix_seconds: float) -> str:
    """An instant as Ollama writes it (RFC 3339, UTC)."""
    return datetime.fromtimestamp(unix_seconds, UTC).isoformat().replace("+00:00", "Z")


class Stopwatch:
    """When a request arrived, its model was ready, and its first token came (nanoseconds)."""

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.clock = clock
        self.arrived = clock()
        self.started: int | None = None
        self.first_token: int | None = None

    def start(self) -> None:
        """The request holds a slot of its model, which is loaded."""
        self.started = self.clock()

    def token(self) -> None:
        """A token came (only the first one counts)."""
        if self.first_token is None:
            self.first_token = self.clock()

    def timings(self, prompt_tokens: int, output_tokens: int) -> OllamaTimings:
        """The figures of a finished answer."""
        end = self.clock()
        started = self.started if self.started is not None else end
        first = self.first_token if self.first_token is not None else end
        return OllamaTimings(
            total_duration=end - self.arrived,
            load_duration=started - self.arrived,
            prompt_eval_count=prompt_tokens,
            prompt_eval_duration=first - started,
            eval_count=output_tokens,
            eval_duration=end - first,
        )


class OllamaTranslator:
    """Turns a response's events into Ollama chunks of one kind (chat or generate).

    Text and thinking go out as they come; a tool call goes out whole once its arguments are
    complete, as Ollama sends calls. ``thinking`` false drops the model's reasoning.
    """

    def __init__(
        self,
        model: str,
        kind: Literal["chat", "generate"],
        stopwatch: Stopwatch,
        *,
        thinking: bool = True,
    ) -> None:
        self.model = model
        self.kind = kind
        self.stopwatch = stopwatch
        self.thinking = thinking
        self._calls = 0

    def chunk(
        self,
        content: str = "",
        thinking: str | None = None,
        calls: list[OllamaToolCall] | None = None,
        **final: Any,
    ) -> OllamaChatChunk | OllamaGenerateChunk:
        """A chunk carrying these pieces (and, for the last one, ``final``'s fields)."""
        created = timestamp(time.time())
        if self.kind == "generate":
            return OllamaGenerateChunk(
                model=self.model, created_at=created, response=content, thinking=thinking, **final
            )
        message = OllamaAnswerMessage(content=content, thinking=thinking, tool_calls=calls)
        return OllamaChatChunk(model=self.model, created_at=created, message=message, **final)

    def feed(self, event: ResponseEvent) -> list[OllamaChunk]:
        """The chunks of ``event`` (none for events that add nothing to the answer)."""
        return self._of(event.data)

    def _of(self, data: EventData) -> list[OllamaChunk]:
        if isinstance(data, OutputTextDelta):
            self.stopwatch.token()
            return [self.chunk(data.delta)]
        if isinstance(data, ReasoningSummaryTextDelta):
            self.stopwatch.token()
            return [self.chunk(thinking=data.delta)] if self.thinking else []
        if isinstance(data, OutputItemDone) and isinstance(data.item, OutputFunctionCall):
            self.stopwatch.token()
            call = self._call(data.item)
            return [self.chunk(calls=[call])] if self.kind == "chat" else []
        if isinstance(data, EndedWithResponse):
            return [self.last(data.response)]
        if isinstance(data, EndedWithError):
            return [OllamaError(error=data.error.detail or data.error.title)]
        return []

    def _call(self, item: OutputFunctionCall) -> OllamaToolCall:
        try:
            arguments = json.loads(item.arguments)
        except ValueError:
            arguments = {}
        if not isinstance(arguments, dict):
            arguments = {}
        call = OllamaFunctionCall(index=self._calls, name=item.name, arguments=arguments)
        self._calls += 1
        return OllamaToolCall(id=item.call_id, function=call)

    def last(self, response: Response) -> OllamaChatChunk | OllamaGenerateChunk:
        """The final chunk of ``response``: why it ended, its counts and durations."""
        return self.chunk(**self._final(response))

    def _final(self, response: Response) -> dict[str, Any]:
        usage = response.usage
        timings = self.stopwatch.timings(
            usage.input_tokens if usage else 0, usage.output_tokens if usage else 0
        )
        reason = "length" if response.status == "incomplete" else "stop"
        return {"done": True, "done_reason": reason, **timings.model_dump()}

    def whole(self, response: Response) -> OllamaChatChunk | OllamaGenerateChunk:
        """A final response as one answer (``stream: false``)."""
        text = "".join(
            part.text
            for item in response.output
            if isinstance(item, OutputMessage)
            for part in item.content
        )
        reasoning = "".join(
            part.text
            for item in response.output
            if isinstance(item, OutputReasoning)
            for part in item.summary
        )
        calls = [
            self._call(item) for item in response.output if isinstance(item, OutputFunctionCall)
        ]
        return self.chunk(
            text,
            thinking=reasoning if reasoning and self.thinking else None,
            calls=calls if calls and self.kind == "chat" else None,
            **self._final(response),
        )


#: The ``done_reason`` of an answer that only loaded or unloaded its model.
LoadReason = Literal["load", "unload"]


def load_chunk(model: str, reason: LoadReason, kind: Literal["chat", "generate"]) -> OllamaChunk:
    """The answer to an empty prompt, which only loads (or, with ``keep_alive`` 0, unloads)."""
    created = timestamp(time.time())
    if kind == "generate":
        return OllamaGenerateChunk(model=model, created_at=created, done=True, done_reason=reason)
    return OllamaChatChunk(
        model=model,
        created_at=created,
        message=OllamaAnswerMessage(),
        done=True,
        done_reason=reason,
    )
