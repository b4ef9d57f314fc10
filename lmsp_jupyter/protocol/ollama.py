"""Ollama's API requests (``/api/chat``, ``/api/generate``), translated at the edge.

An Ollama chat or generate request becomes the Chat Completions request that asks the same
(:mod:`.chat`), and so one :class:`ResponseRequest`; the answers are in :mod:`.ollama_answers`.
Lenient where Ollama is (unknown options are ignored), strict on types. Pure data, no service.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .chat import (
    AssistantMessage,
    ChatCompletionRequest,
    ChatFunction,
    ChatFunctionCall,
    ChatJsonSchema,
    ChatJsonSchemaFormat,
    ChatMessage,
    ChatResponseFormat,
    ChatTool,
    ChatToolCall,
    SystemMessage,
    ToolMessage,
    UserMessage,
    as_response_request,
)
from .embeddings import MAX_INPUTS, EmbeddingText
from .errors import LmspError
from .items import MAX_ITEMS, MAX_TEXT_CHARS
from .models import EXTENSION_KEY, ModelName
from .requests import JsonObjectFormat, ResponseRequest, SamplingFields

#: The Ollama version ``/api/version`` reports: the API this module follows (VS Code's
#: Ollama provider asks for at least 0.6.4).
OLLAMA_VERSION = "0.12.0"

_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


class _Lenient(BaseModel):
    """Ollama ignores fields it does not know; their types it checks."""

    model_config = ConfigDict(extra="ignore", strict=True)


class OllamaOptions(_Lenient, SamplingFields):
    """``options``: the sampling settings served (others, load-time ones among them, ignored)."""

    stop: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        default=None, max_length=4
    )
    num_predict: int | None = Field(
        default=None, description="Tokens to generate at most; -1 or -2: up to the window."
    )
    num_ctx: int | None = Field(
        default=None,
        ge=1,
        description="Accepted and not applied: a model's window is set when it loads, for all "
        "its requests (LocalEngine.context_size); a prompt is never cut to num_ctx.",
    )

    @field_validator("stop")
    @classmethod
    def _no_stop_is_none(cls, value: list[str] | None) -> list[str] | None:
        return value or None


class OllamaFunctionCall(_Lenient):
    """The function of a tool call, its arguments an object."""

    name: str = Field(max_length=255)
    arguments: dict[str, Any] = Field(default_factory=dict)


class OllamaToolCall(_Lenient):
    """A call an assistant message made (Ollama's ids are optional)."""

    id: str | None = Field(default=None, max_length=255)
    function: OllamaFunctionCall


class OllamaMessage(_Lenient):
    """One message of ``/api/chat``."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = Field(default="", max_length=MAX_TEXT_CHARS)
    thinking: str | None = Field(default=None, description="Accepted and not sent on.")
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = Field(default=None, max_length=128)
    tool_name: str | None = Field(default=None, max_length=255)
    tool_call_id: str | None = Field(default=None, max_length=255)


class OllamaTool(_Lenient):
    """A function the model may call, as ``/api/chat`` offers it."""

    type: Literal["function"] = "function"
    function: ChatFunction


KeepAlive = float | int | str
OutputFormat = Literal["", "json"] | dict[str, Any]


class _GenerationRequest(_Lenient):
    """What ``/api/chat`` and ``/api/generate`` share."""

    model: ModelName
    stream: bool = True
    format: OutputFormat | None = None
    options: OllamaOptions | None = None
    keep_alive: KeepAlive | None = None
    think: bool | Literal["low", "medium", "high"] | None = None


class OllamaChatRequest(_GenerationRequest):
    """``POST /api/chat``."""

    messages: list[OllamaMessage] = Field(default_factory=list, max_length=MAX_ITEMS)
    tools: list[OllamaTool] | None = Field(default=None, max_length=128)


class OllamaGenerateRequest(_GenerationRequest):
    """``POST /api/generate``."""

    prompt: str = Field(default="", max_length=MAX_TEXT_CHARS)
    suffix: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    system: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    template: str | None = None
    raw: bool = False
    images: list[str] | None = None
    context: list[int] | None = Field(default=None, description="Ignored.")


class OllamaEmbedRequest(_Lenient):
    """``POST /api/embed``: one text or several; none (no ``input``, ``""`` or ``[]``) only
    loads the model, as Ollama does."""

    model: ModelName
    input: (
        Literal[""]
        | EmbeddingText
        | Annotated[list[EmbeddingText], Field(max_length=MAX_INPUTS)]
        | None
    ) = None
    truncate: bool = Field(
        default=True, description="Texts over the window are cut to it; false: refused."
    )
    dimensions: int | None = Field(default=None, ge=1)
    options: dict[str, Any] | None = Field(default=None, description="Ignored.")
    keep_alive: KeepAlive | None = Field(
        default=None, description="How long the model stays loaded once idle."
    )

    def texts(self) -> list[str]:
        """``input`` as a list (empty: only load the model)."""
        if not self.input:
            return []
        return [self.input] if isinstance(self.input, str) else list(self.input)


class OllamaEmbeddingsRequest(_Lenient):
    """``POST /api/embeddings``, Ollama's older endpoint: one ``prompt``."""

    model: ModelName
    prompt: EmbeddingText
    options: dict[str, Any] | None = Field(default=None, description="Ignored.")
    keep_alive: KeepAlive | None = Field(
        default=None, description="How long the model stays loaded once idle."
    )


class OllamaShowRequest(_Lenient):
    """``POST /api/show``: ``model``, or ``name`` as older clients send it."""

    model: str | None = Field(default=None, max_length=512)
    name: str | None = Field(default=None, max_length=512)
    verbose: bool | None = None

    def model_name(self) -> str:
        """The model asked about."""
        name = self.model or self.name
        if not name:
            raise LmspError("invalid_request", "model is required", param="model")
        return name


def keep_alive_seconds(value: KeepAlive | None) -> float | None:
    """Ollama's ``keep_alive`` in seconds: a number of seconds or a Go duration (``5m``,
    ``1h30m``); negative: not unloaded for being idle. ``None`` when not given."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise LmspError("invalid_request", "keep_alive must be a duration", param="keep_alive")
    seconds = float(value) if isinstance(value, int | float) else _duration(value.strip())
    if not math.isfinite(seconds):
        raise LmspError("invalid_request", "keep_alive must be finite", param="keep_alive")
    return -1.0 if seconds < 0 else seconds


def _duration(text: str) -> float:
    """A Go duration (``-1m``, ``300ms``), or a bare number of seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    parts = _GO_DURATION.findall(body)
    if not body or "".join(number + unit for number, unit in parts) != body:
        raise LmspError(
            "invalid_request", f"keep_alive {text!r} is not a duration", param="keep_alive"
        )
    return sign * sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def chat_request(request: OllamaChatRequest) -> ResponseRequest:
    """The response request that does what an Ollama chat request asks."""
    return _as_response(request, _chat_messages(request.messages), request.tools)


def generate_request(request: OllamaGenerateRequest) -> ResponseRequest:
    """The response request that does what an Ollama generate request asks: the prompt as
    one user turn (after ``system``), through the model's chat template; for a raw prompt
    (:func:`raw_prompt`) only the model and the sampling, the prompt going as text."""
    if request.images:
        raise LmspError("unsupported_capability", "images are not supported", param="images")
    if request.raw and (request.template or request.system or request.context):
        raise LmspError(  # Ollama's words
            "invalid_request", "raw mode does not support template, system, or context"
        )
    if request.template:
        raise LmspError("unsupported_capability", "a request's own template is not supported")
    messages: list[ChatMessage] = []
    if request.system and raw_prompt(request) is None:
        messages.append(SystemMessage(role="system", content=request.system))
    messages.append(UserMessage(role="user", content=request.prompt))
    return _as_response(request, messages, None)


def raw_prompt(request: OllamaGenerateRequest) -> tuple[str, str | None] | None:
    """The text and suffix of a generate request that goes through no chat template: ``raw``
    (the prompt continued as it is) or with a ``suffix`` (the gap filled in where the model
    has FIM tokens, else the prompt continued; ``system`` is not used, as Ollama's FIM
    templates leave it out); ``None`` for a prompt through the chat template."""
    suffix = request.suffix or None  # Ollama reads an empty suffix as none
    if not request.raw and suffix is None:
        return None
    return request.prompt, suffix


def _as_response(
    request: _GenerationRequest, messages: list[ChatMessage], tools: list[OllamaTool] | None
) -> ResponseRequest:
    if not messages:
        raise LmspError("invalid_request", "messages must not be empty", param="messages")
    options = request.options or OllamaOptions()
    num_predict = options.num_predict
    if num_predict is not None and num_predict == 0:
        raise LmspError("invalid_request", "num_predict must not be 0", param="options.num_predict")
    chat = ChatCompletionRequest(
        model=request.model,
        messages=messages,
        max_tokens=num_predict if num_predict is not None and num_predict > 0 else None,
        **options.sampling(),
        tools=[ChatTool(type="function", function=tool.function) for tool in tools or []] or None,
        response_format=_response_format(request.format),
    )
    seconds = keep_alive_seconds(request.keep_alive)
    extensions = None if seconds is None else {EXTENSION_KEY: {"keep_alive_seconds": seconds}}
    return as_response_request(chat).model_copy(update={"extensions": extensions})


def _response_format(given: OutputFormat | None) -> ChatResponseFormat | None:
    """``format``: ``"json"`` (any JSON object) or a JSON Schema, both decoder-enforced."""
    if not given:
        return None
    if given == "json":
        return JsonObjectFormat(type="json_object")
    assert isinstance(given, dict)
    schema = ChatJsonSchema(name="format", schema_=given, strict=True)
    return ChatJsonSchemaFormat(type="json_schema", json_schema=schema)


def _chat_messages(messages: list[OllamaMessage]) -> list[ChatMessage]:
    """Ollama's messages as chat messages. Ollama's calls may come without ids: each gets one,
    and a ``tool`` message answers the call it names (``tool_call_id``, else the first
    unanswered one of its ``tool_name``, else the first unanswered one)."""
    chat: list[ChatMessage] = []
    unanswered: list[tuple[str, str]] = []  # (call id, function name)
    for index, message in enumerate(messages):
        if message.images:
            raise LmspError(
                "unsupported_capability",
                "images are not supported",
                param=f"messages[{index}].images",
            )
        if message.role == "system":
            chat.append(SystemMessage(role="system", content=message.content))
        elif message.role == "user":
            chat.append(UserMessage(role="user", content=message.content))
        elif message.role == "assistant":
            calls = [
                ChatToolCall(
                    id=call.id or f"call_{index}_{number}",
                    function=ChatFunctionCall(
                        name=call.function.name, arguments=json.dumps(call.function.arguments)
                    ),
                )
                for number, call in enumerate(message.tool_calls or [])
            ]
            unanswered += [(call.id, call.function.name) for call in calls]
            chat.append(
                AssistantMessage(
                    role="assistant", content=message.content, tool_calls=calls or None
                )
            )
        else:
            call_id = _answered_call(message, unanswered, index)
            chat.append(ToolMessage(role="tool", tool_call_id=call_id, content=message.content))
    return chat


def _answered_call(message: OllamaMessage, unanswered: list[tuple[str, str]], index: int) -> str:
    """The id of the call a ``tool`` message answers (taken off ``unanswered``)."""
    for position, (call_id, name) in enumerate(unanswered):
        if message.tool_call_id is not None:
            answers = call_id == message.tool_call_id
        else:
            answers = message.tool_name in (None, name)
        if answers:
            del unanswered[position]
            return call_id
    raise LmspError(
        "invalid_request",
        "this tool message answers no earlier tool call",
        param=f"messages[{index}]",
    )
