"""OpenAI's Chat Completions (LMSP 1.0 section 11.3), translated at the edge.

A chat request becomes one :class:`ResponseRequest`; the answers (a ``chat.completion``, or
``chat.completion.chunk`` objects) are in :mod:`.chat_answers`. Pure data, no service.
"""

from __future__ import annotations

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
from .logprobs import LOGPROBS_INCLUDE, TopLogprobs
from .models import EXTENSION_KEY
from .requests import (
    FunctionTool,
    JsonObjectFormat,
    JsonSchemaFormat,
    Metadata,
    NamedToolChoice,
    ResponseRequest,
    SamplingFields,
    TextFormat,
    TextJsonSchemaFormat,
    as_response_format,
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


#: A prompt-caching hint (Anthropic's, which LiteLLM puts on system messages, as Jupyternaut
#: asks): accepted and ignored, as the service's cache needs none.
CacheControl = dict[str, Any] | None


class TextPart(_Strict):
    """A text part of a message's content."""

    type: Literal["text"]
    text: str = Field(max_length=MAX_TEXT_CHARS)
    cache_control: CacheControl = Field(default=None, description="Accepted and ignored.")


class ReservedChatPart(BaseModel):
    """A content part LMSP 1.0 reserves (images, audio, files): refused."""

    model_config = ConfigDict(extra="allow")

    type: Literal["image_url", "input_audio", "file"]


class Prediction(_Strict):
    """``{"type": "content", "content": ...}``: the answer as the caller expects it (the code
    being edited, say); the engine verifies it a stretch at a time."""

    type: Literal["content"]
    content: (
        Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
        | Annotated[list[TextPart], Field(max_length=MAX_ITEMS)]
    )

    def text(self) -> str:
        """The predicted text, its parts joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


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
    cache_control: CacheControl = Field(default=None, description="Accepted and ignored.")


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


class ChatCompletionRequest(_Strict, SamplingFields):
    """``POST /lmsp/v1/chat/completions``."""

    model: str = Field(min_length=1, max_length=512)
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_ITEMS)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, description="Only 1.")
    tools: list[ChatTool] | None = Field(default=None, max_length=128)
    tool_choice: Literal["auto", "none", "required"] | ChatNamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ChatResponseFormat | None = None
    metadata: Metadata | None = None
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None
    prediction: Prediction | None = Field(
        default=None, description="The answer as expected, mostly: verified, never copied."
    )
    # Accepted and ignored.
    user: str | None = Field(default=None, max_length=512)
    store: bool | None = None
    service_tier: str | None = Field(default=None, max_length=64)
    reasoning_effort: str | None = Field(default=None, max_length=64)
    safety_identifier: str | None = Field(default=None, max_length=512)
    prompt_cache_key: str | None = Field(default=None, max_length=512)


def as_response_request(chat: ChatCompletionRequest) -> ResponseRequest:
    """The response request that does what ``chat`` asks."""
    if chat.n not in (None, 1):
        raise LmspError("invalid_request", "only n = 1 is served", param="n")
    if chat.top_logprobs is not None and not chat.logprobs:
        raise LmspError(
            "invalid_request", "top_logprobs needs logprobs: true", param="top_logprobs"
        )
    return ResponseRequest(
        model=chat.model,
        input=_input_items(chat.messages),
        max_output_tokens=chat.max_completion_tokens or chat.max_tokens,
        **chat.sampling(),
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
        include=[LOGPROBS_INCLUDE] if chat.logprobs else None,
        top_logprobs=chat.top_logprobs,
        extensions=prediction_extensions(chat.prediction),
    )


def chat_param(chat: ChatCompletionRequest, param: str) -> str:
    """A field of the response request that ``chat`` became, named as ``chat`` names it."""
    if param == "max_output_tokens":
        return "max_tokens" if chat.max_completion_tokens is None else "max_completion_tokens"
    if param.startswith("input"):
        return "messages"  # one message may have become several items
    return unextended_param(param)


def prediction_extensions(prediction: Prediction | None) -> dict[str, Any] | None:
    """The ``extensions`` of the response request an OpenAI dialect's request became: its
    ``prediction`` under this service's own key."""
    return None if prediction is None else {EXTENSION_KEY: {"prediction": prediction.model_dump()}}


def unextended_param(param: str) -> str:
    """A field of this service's extension (``extensions.x-lmsp-jupyter.prediction``) named as
    the OpenAI dialects name it, at the top of their request (``prediction``)."""
    return param.removeprefix(f"extensions.{EXTENSION_KEY}.")


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
