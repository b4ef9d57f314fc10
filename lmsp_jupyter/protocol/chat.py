"""OpenAI's Chat Completions (LMSP 1.0 section 11.3), translated at the edge.

A chat request becomes one :class:`ResponseRequest`; a response becomes a ``chat.completion``
and a response's events become ``chat.completion.chunk`` objects. Pure data, no service.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import LmspError
from .events import (
    EventData,
    FunctionCallArgumentsDelta,
    OutputItemAdded,
    OutputTextDelta,
    ReasoningSummaryTextDelta,
    ResponseCancelled,
    ResponseCompleted,
    ResponseEvent,
    ResponseFailed,
    ResponseIncomplete,
    StreamError,
)
from .items import (
    MAX_ITEMS,
    MAX_TEXT_CHARS,
    FunctionCall,
    FunctionCallOutput,
    InputItem,
    InputMessage,
    OutputFunctionCall,
    OutputMessage,
    OutputReasoning,
)
from .requests import (
    FunctionTool,
    JsonObjectFormat,
    JsonSchemaFormat,
    Metadata,
    NamedToolChoice,
    ResponseRequest,
    Stop,
    TextFormat,
    TextJsonSchemaFormat,
    as_response_format,
)
from .responses import Response, Usage


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class TextPart(_Strict):
    """A text part of a message's content."""

    type: Literal["text"]
    text: str = Field(max_length=MAX_TEXT_CHARS)


class ReservedChatPart(BaseModel):
    """A content part LMSP 1.0 reserves (images, audio, files): refused."""

    model_config = ConfigDict(extra="allow")

    type: Literal["image_url", "input_audio", "file"]


ChatContent = (
    Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
    | Annotated[
        list[Annotated[TextPart | ReservedChatPart, Field(discriminator="type")]],
        Field(max_length=MAX_ITEMS),
    ]
)


class ChatFunctionCall(_Strict):
    """The function of a tool call: its name and JSON-encoded arguments."""

    name: str = Field(max_length=255)
    arguments: str = Field(max_length=MAX_TEXT_CHARS)


class ChatToolCall(_Strict):
    """A call an assistant message made."""

    id: str = Field(max_length=255)
    type: Literal["function"] = "function"
    function: ChatFunctionCall


class SystemMessage(_Strict):
    """A ``system`` or ``developer`` message."""

    role: Literal["system", "developer"]
    content: ChatContent
    name: str | None = None


class UserMessage(_Strict):
    """A ``user`` message."""

    role: Literal["user"]
    content: ChatContent
    name: str | None = None


class AssistantMessage(_Strict):
    """An ``assistant`` message: text, calls or both."""

    role: Literal["assistant"]
    content: ChatContent | None = None
    tool_calls: list[ChatToolCall] | None = Field(default=None, max_length=128)
    name: str | None = None
    refusal: str | None = None
    reasoning_content: str | None = Field(default=None, description="Accepted and not sent on.")


class ToolMessage(_Strict):
    """A ``tool`` message: the output of one call."""

    role: Literal["tool"]
    tool_call_id: str = Field(max_length=255)
    content: ChatContent


ChatMessage = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]


class ChatFunction(_Strict):
    """A function tool's definition."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None


class ChatTool(_Strict):
    """A function the model may call."""

    type: Literal["function"]
    function: ChatFunction


class ChatNamedFunction(_Strict):
    """The function ``tool_choice`` names."""

    name: str


class ChatNamedToolChoice(_Strict):
    """Force a call of one named function."""

    type: Literal["function"]
    function: ChatNamedFunction


class ChatJsonSchema(_Strict):
    """A named JSON Schema the output must validate against."""

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ChatJsonSchemaFormat(_Strict):
    """Output constrained to a JSON Schema."""

    type: Literal["json_schema"]
    json_schema: ChatJsonSchema


ChatResponseFormat = Annotated[
    TextFormat | JsonObjectFormat | ChatJsonSchemaFormat, Field(discriminator="type")
]


class StreamOptions(_Strict):
    """``stream_options``: whether a last chunk carries the usage."""

    include_usage: bool = False
    include_obfuscation: bool | None = Field(default=None, description="Ignored.")


class ChatCompletionRequest(_Strict):
    """``POST /lmsp/v1/chat/completions``."""

    model: str = Field(min_length=1, max_length=512)
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_ITEMS)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=1, le=1000)
    min_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    stop: Stop | None = None
    n: int | None = Field(default=None, description="Only 1.")
    tools: list[ChatTool] | None = Field(default=None, max_length=128)
    tool_choice: Literal["auto", "none", "required"] | ChatNamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ChatResponseFormat | None = None
    metadata: Metadata | None = None
    # Accepted and ignored.
    user: str | None = Field(default=None, max_length=512)
    store: bool | None = None
    service_tier: str | None = Field(default=None, max_length=64)
    reasoning_effort: str | None = Field(default=None, max_length=64)
    logprobs: Literal[False] | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    safety_identifier: str | None = Field(default=None, max_length=512)
    prompt_cache_key: str | None = Field(default=None, max_length=512)


def as_response_request(chat: ChatCompletionRequest) -> ResponseRequest:
    """The response request that does what ``chat`` asks."""
    if chat.n not in (None, 1):
        raise LmspError("invalid_request", "only n = 1 is served", param="n")
    return ResponseRequest(
        model=chat.model,
        input=_input_items(chat.messages),
        max_output_tokens=chat.max_completion_tokens or chat.max_tokens,
        temperature=chat.temperature,
        top_p=chat.top_p,
        top_k=chat.top_k,
        min_p=chat.min_p,
        seed=chat.seed,
        stop=chat.stop,
        response_format=_response_format(chat.response_format),
        tools=[
            FunctionTool(
                type="function",
                name=tool.function.name,
                description=tool.function.description,
                parameters=tool.function.parameters,
                strict=tool.function.strict,
            )
            for tool in chat.tools or []
        ]
        or None,
        tool_choice=_tool_choice(chat),
        parallel_tool_calls=chat.parallel_tool_calls,
        metadata=chat.metadata,
    )


def chat_param(chat: ChatCompletionRequest, param: str | None) -> str | None:
    """A field of the response request that ``chat`` became, named as ``chat`` names it."""
    if param is None:
        return None
    if param == "max_output_tokens":
        return "max_tokens" if chat.max_completion_tokens is None else "max_completion_tokens"
    if param.startswith("input"):
        return "messages"  # one message may have become several items
    return param


def _text(content: ChatContent | None, param: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    for index, part in enumerate(content):
        if isinstance(part, ReservedChatPart):
            raise LmspError(
                "unsupported_capability",
                f"content type {part.type!r} is reserved and not supported in LMSP 1.0",
                param=f"{param}.content[{index}].type",
            )
    return "".join(part.text for part in content if isinstance(part, TextPart))


def _input_items(messages: list[ChatMessage]) -> list[InputItem]:
    items: list[InputItem] = []
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if isinstance(message, SystemMessage):
            items.append(InputMessage(role="system", content=_text(message.content, param)))
        elif isinstance(message, UserMessage):
            items.append(InputMessage(role="user", content=_text(message.content, param)))
        elif isinstance(message, AssistantMessage):
            text = _text(message.content, param)
            if text or not message.tool_calls:
                items.append(InputMessage(role="assistant", content=text))
            items += [
                FunctionCall(
                    call_id=call.id, name=call.function.name, arguments=call.function.arguments
                )
                for call in message.tool_calls or []
            ]
        else:
            items.append(
                FunctionCallOutput(
                    type="function_call_output",
                    call_id=message.tool_call_id,
                    output=_text(message.content, param),
                )
            )
    return items


def _response_format(given: ChatResponseFormat | None) -> TextFormat | JsonSchemaFormat | None:
    if given is None:
        return None
    if not isinstance(given, ChatJsonSchemaFormat):
        return as_response_format(given)
    spec = given.json_schema
    flat = TextJsonSchemaFormat(
        type="json_schema",
        name=spec.name,
        description=spec.description,
        schema_=spec.schema_,
        strict=spec.strict,
    )
    return as_response_format(flat)


def _tool_choice(chat: ChatCompletionRequest) -> Any:
    choice = chat.tool_choice
    if isinstance(choice, ChatNamedToolChoice):
        return NamedToolChoice(type="function", name=choice.function.name)
    return choice


# --- answers --------------------------------------------------------------------------------


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


class ChatChoice(BaseModel):
    """The one choice of a ``chat.completion``."""

    index: int = 0
    message: ChatAnswer
    finish_reason: Literal["stop", "length", "tool_calls"]
    logprobs: None = None


class ChatCompletion(BaseModel):
    """``chat.completion``: the answer to a chat request."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage | None
    system_fingerprint: None = None


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
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """``chat.completion.chunk``: one piece of a streamed answer."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: ChatUsage | None = None
    system_fingerprint: None = None


class ChatStreamError(BaseModel):
    """A problem that ends a chat stream: ``{"error": <problem>}``."""

    error: dict[str, Any]


class ChatStreamDone(BaseModel):
    """The end of a chat stream: ``data: [DONE]``."""


#: What a chat stream sends: chunks, then ``[DONE]``, or an error and ``[DONE]``.
ChatStreamFrame = ChatCompletionChunk | ChatStreamError | ChatStreamDone


def chat_usage(usage: Usage) -> ChatUsage:
    """Usage in Chat Completions' words."""
    return ChatUsage(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        prompt_tokens_details={"cached_tokens": usage.input_tokens_details.cached_tokens},
        completion_tokens_details={
            "reasoning_tokens": usage.output_tokens_details.reasoning_tokens
        },
    )


def _finish_reason(status: str, calls: bool) -> Literal["stop", "length", "tool_calls"]:
    if status == "incomplete":
        return "length"
    return "tool_calls" if calls else "stop"


def chat_completion(response: Response) -> ChatCompletion:
    """A final response as a ``chat.completion``."""
    texts = [
        part.text
        for item in response.output
        if isinstance(item, OutputMessage)
        for part in item.content
    ]
    reasoning = [
        part.text
        for item in response.output
        if isinstance(item, OutputReasoning)
        for part in item.summary
    ]
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
            ChatChoice(message=answer, finish_reason=_finish_reason(response.status, bool(calls)))
        ],
        usage=chat_usage(response.usage) if response.usage is not None else None,
    )


class ChunkTranslator:
    """Turns a response's events into chunks, one choice, the usage last if asked for."""

    def __init__(self, response: Response, *, include_usage: bool) -> None:
        self.response = response
        self.include_usage = include_usage
        self._calls: dict[str, int] = {}  # function call item id → its tool_calls index

    def _chunk(self, delta: ChunkDelta, finish_reason: Any = None) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.response.id,
            created=self.response.created_at,
            model=self.response.model,
            choices=[ChunkChoice(delta=delta, finish_reason=finish_reason)],
        )

    def first(self) -> ChatCompletionChunk:
        """The chunk that opens the stream: the assistant's role."""
        return self._chunk(ChunkDelta(role="assistant", content=""))

    def feed(self, event: ResponseEvent) -> list[ChatStreamFrame]:
        """The chunks of ``event`` (none for events that add nothing to the message)."""
        return self._of(event.data)

    def _of(self, data: EventData) -> list[ChatStreamFrame]:
        if isinstance(data, OutputTextDelta):
            return [self._chunk(ChunkDelta(content=data.delta))]
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
        if isinstance(data, ResponseCompleted | ResponseIncomplete | ResponseCancelled):
            reason = _finish_reason(data.status, bool(self._calls))
            chunks: list[ChatStreamFrame] = [self._chunk(ChunkDelta(), reason)]
            usage = getattr(data, "usage", None)
            if self.include_usage and usage is not None:
                chunks.append(
                    ChatCompletionChunk(
                        id=self.response.id,
                        created=self.response.created_at,
                        model=self.response.model,
                        choices=[],
                        usage=chat_usage(usage),
                    )
                )
            return [*chunks, ChatStreamDone()]
        if isinstance(data, ResponseFailed | StreamError):
            return [
                ChatStreamError(error=data.error.model_dump(exclude_none=True)),
                ChatStreamDone(),
            ]
        return []
