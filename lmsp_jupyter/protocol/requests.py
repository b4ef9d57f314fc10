"""The request to create a response (LMSP 1.0 section 6.1) and its validation."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import LmspError
from .items import MAX_ITEMS, MAX_TEXT_CHARS, InputItem, InputMessage, InputText, ReservedPart
from .logprobs import LOGPROBS_INCLUDE, TopLogprobs
from .models import EXTENSION_KEY, EXTENSION_KEY_PATTERN, ModelName

M = TypeVar("M", bound=BaseModel)

_EXTENSION_KEY = re.compile(EXTENSION_KEY_PATTERN)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class TextFormat(_Strict):
    """Plain text output (the default)."""

    type: Literal["text"]


class JsonSchemaSpec(_Strict):
    """A named JSON Schema the output must validate against."""

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool = True


class JsonSchemaFormat(_Strict):
    """Output constrained to a JSON Schema."""

    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[TextFormat | JsonSchemaFormat, Field(discriminator="type")]


class JsonObjectFormat(_Strict):
    """Output that is any JSON object (decoder-enforced as the schema ``{"type": "object"}``)."""

    type: Literal["json_object"]


class TextJsonSchemaFormat(_Strict):
    """``text.format`` of a JSON Schema, in OpenAI's flat shape (11.1)."""

    type: Literal["json_schema"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


TextFormatParam = Annotated[
    TextFormat | JsonObjectFormat | TextJsonSchemaFormat, Field(discriminator="type")
]


class TextOptions(_Strict):
    """``text``: the output format (the same as ``response_format``), and a verbosity hint."""

    format: TextFormatParam | None = None
    verbosity: Literal["low", "medium", "high"] | None = Field(None, description="Ignored.")


class FunctionTool(_Strict):
    """A function the client can run for the model (LMSP 1.0 section 6.5)."""

    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = Field(None, description="Accepted; calls are always decoder-enforced.")


class McpToolNames(_Strict):
    """Tools of an MCP server named by their names (``allowed_tools``, ``require_approval``)."""

    tool_names: list[Annotated[str, Field(max_length=255)]] = Field(max_length=1024)
    read_only: bool | None = Field(None, description="Accepted; not a filter here.")


class McpApprovalFilter(_Strict):
    """Which tools need approval (``always``) and which do not (``never``), by name (11.6)."""

    always: McpToolNames | None = None
    never: McpToolNames | None = None


class McpTool(_Strict):
    """The tools of an MCP server the service runs for the model (11.6)."""

    type: Literal["mcp"]
    server_label: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    server_url: str | None = Field(default=None, max_length=2048)
    server_description: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    allowed_tools: (
        Annotated[list[Annotated[str, Field(max_length=255)]], Field(max_length=1024)]
        | McpToolNames
        | None
    ) = None
    require_approval: Literal["always", "never"] | McpApprovalFilter | None = None
    headers: dict[str, Annotated[str, Field(max_length=8192)]] | None = Field(
        default=None, max_length=64
    )

    def allows(self, name: str) -> bool:
        """Whether ``allowed_tools`` lets the model call the tool ``name``."""
        allowed = self.allowed_tools
        if allowed is None:
            return True
        return name in (allowed if isinstance(allowed, list) else allowed.tool_names)

    def needs_approval(self, name: str) -> bool:
        """Whether a call of ``name`` waits for the user's approval (``always`` by default)."""
        rule = self.require_approval
        if rule is None or isinstance(rule, str):
            return rule != "never"
        if rule.always is not None and name in rule.always.tool_names:
            return True
        return not (rule.never is not None and name in rule.never.tool_names)


Tool = Annotated[FunctionTool | McpTool, Field(discriminator="type")]


class NamedToolChoice(_Strict):
    """Force a call of one named function."""

    type: Literal["function"]
    name: str


class AllowedTool(_Strict):
    """A function that ``allowed_tools`` lets the model call."""

    type: Literal["function"]
    name: str


class AllowedToolsChoice(_Strict):
    """Only these tools, called as ``mode`` says (11.1)."""

    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[AllowedTool] = Field(min_length=1, max_length=128)


class McpToolChoice(_Strict):
    """Force a call of one tool of an MCP server (11.6); without ``name``, of any of its tools."""

    type: Literal["mcp"]
    server_label: str = Field(min_length=1, max_length=64)
    name: str | None = Field(default=None, max_length=255)


ToolChoice = (
    Literal["auto", "none", "required"]
    | Annotated[NamedToolChoice | AllowedToolsChoice | McpToolChoice, Field(discriminator="type")]
)

#: Up to 16 string pairs kept with a response or task (LMSP 1.0 sections 7 and 11.1).
Metadata = Annotated[
    dict[Annotated[str, Field(min_length=1, max_length=64)], Annotated[str, Field(max_length=512)]],
    Field(max_length=16),
]

#: Text that ends generation: one string or up to 4.
Stop = (
    Annotated[str, Field(min_length=1, max_length=256)]
    | Annotated[
        list[Annotated[str, Field(min_length=1, max_length=256)]], Field(min_length=1, max_length=4)
    ]
)


#: Sampling settings, bounded alike in every request that carries them (11.1, 11.3).
Temperature = Annotated[float, Field(ge=0, le=2)]
TopP = Annotated[float, Field(gt=0, le=1)]
TopK = Annotated[int, Field(ge=1, le=1000)]
MinP = Annotated[float, Field(ge=0, le=1)]
Seed = Annotated[int, Field(ge=-(2**63), lt=2**63)]
#: ``frequency_penalty`` and ``presence_penalty`` (OpenAI's range).
Penalty = Annotated[float, Field(ge=-2, le=2)]


class SamplingFields(BaseModel):
    """The sampling fields, named and bounded alike in the Responses, Chat Completions and
    Completions requests (11.1, 11.3, 11.5)."""

    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    seed: Seed | None = None
    stop: Stop | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None

    def sampling(self) -> dict[str, Any]:
        """These fields as given, as keyword arguments of a :class:`ResponseRequest`."""
        return {name: getattr(self, name) for name in SamplingFields.model_fields}


class ResponseRequest(_Strict, SamplingFields):
    """``POST /lmsp/v1/responses``: what to generate and how."""

    model: ModelName
    input: list[InputItem] = Field(min_length=1, max_length=MAX_ITEMS)
    stream: bool = False
    max_output_tokens: int | None = Field(default=None, ge=1)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = Field(default=None, max_length=128)
    tool_choice: ToolChoice | None = None
    store: bool = False
    previous_response_id: str | None = Field(default=None, max_length=255)
    metadata: Metadata | None = None
    extensions: dict[str, Any] | None = None
    # OpenAI's Responses fields (11.1), mapped onto the ones above.
    instructions: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    text: TextOptions | None = None
    parallel_tool_calls: bool | None = None
    background: bool = False
    #: Alternatives per token when ``include`` asks for logprobs (11.1).
    top_logprobs: TopLogprobs | None = None
    # Accepted and ignored (11.1), but for ``include``'s logprobs.
    user: str | None = Field(default=None, max_length=512)
    safety_identifier: str | None = Field(default=None, max_length=512)
    prompt_cache_key: str | None = Field(default=None, max_length=512)
    service_tier: str | None = Field(default=None, max_length=64)
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = Field(default=None, max_length=64)
    stream_options: dict[str, Any] | None = None
    truncation: Literal["disabled"] | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _bare_string_is_one_user_message(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [InputMessage(role="user", content=[InputText(type="input_text", text=value)])]
        return value

    @field_validator("extensions")
    @classmethod
    def _extension_keys_are_namespaced(cls, value: dict[str, Any] | None) -> Any:
        for key in value or {}:
            if not _EXTENSION_KEY.match(key):
                raise ValueError(f"extension key {key!r} is neither reverse-DNS nor an x- name")
        return value

    def function_tools(self) -> list[FunctionTool]:
        """The request's function tools (its MCP tools are the service's to expand)."""
        return [tool for tool in self.tools or () if isinstance(tool, FunctionTool)]

    def mcp_tools(self) -> list[McpTool]:
        """The request's MCP tools (11.6)."""
        return [tool for tool in self.tools or () if isinstance(tool, McpTool)]

    def logprobs(self) -> int | None:
        """How many alternatives each output token's logprob comes with, when ``include``
        asks for logprobs; ``None`` when it does not."""
        if LOGPROBS_INCLUDE not in (self.include or ()):
            return None
        return self.top_logprobs or 0

    def stop_sequences(self) -> tuple[str, ...]:
        """``stop`` as a tuple, empty when not given."""
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


def keep_alive_extension(extensions: Mapping[str, Any] | None) -> float | None:
    """``extensions["x-lmsp-jupyter"]["keep_alive_seconds"]``: how long the model stays loaded
    once idle after a request (0: unloaded at once, negative: not for being idle)."""
    own = (extensions or {}).get(EXTENSION_KEY)
    if not isinstance(own, dict) or "keep_alive_seconds" not in own:
        return None
    value = own["keep_alive_seconds"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise LmspError(
            "invalid_request",
            "keep_alive_seconds must be a number of seconds",
            param=f"extensions.{EXTENSION_KEY}.keep_alive_seconds",
        )
    return float(value)


def openai_input_item(item: Any) -> Any:
    """An input item as OpenAI's clients send it, as LMSP reads it (11.1).

    A message may come without ``type``, and with the role ``developer`` (a system message).
    """
    if not isinstance(item, dict) or "role" not in item:
        return item
    if "type" not in item:
        item = {"type": "message", **item}
    if item.get("type") == "message" and item["role"] == "developer":
        item = {**item, "role": "system"}
    return item


def parse_json_body(body: bytes) -> dict[str, Any]:
    """Decode a request body that must be one JSON object, strictly (RFC 8259, I-JSON).

    UTF-8 only; no ``NaN``/``Infinity``, no number too large for a double or over
    ``MAX_NUMBER_CHARS`` digits, no duplicate key, no lone surrogate, at most
    ``MAX_JSON_DEPTH`` levels of nesting: anything else is a 400, never a crash further in.
    """
    try:
        value = json.loads(
            body.decode("utf-8"),
            object_pairs_hook=_unique_keys,
            parse_constant=_no_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except _NotIJson as exc:
        raise LmspError("invalid_request", f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise LmspError(
            "invalid_request", f"the body nests deeper than {MAX_JSON_DEPTH} levels"
        ) from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise LmspError("invalid_request", f"the body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise LmspError("invalid_request", "the body must be a JSON object")
    _check_tree(value)
    return value


#: Nesting a request may have: a schema at its depth limit inside a tool fits with room to spare.
MAX_JSON_DEPTH = 100
#: Characters of one JSON number; a longer one is refused before Python converts it.
MAX_NUMBER_CHARS = 64
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class _NotIJson(ValueError):
    """JSON that Python would accept but that has no single meaning (I-JSON, RFC 7493)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise _NotIJson(f"the key {key!r} appears twice in one object")
        value[key] = item
    return value


def _no_constant(name: str) -> Any:
    raise _NotIJson(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _NotIJson(f"a number has more than {MAX_NUMBER_CHARS} characters")
    number = float(text)
    if not math.isfinite(number):
        raise _NotIJson(f"{text} is out of the range of a double")
    return number


def _bounded_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise _NotIJson(f"a number has more than {MAX_NUMBER_CHARS} characters")
    return int(text)


def _check_tree(value: Any) -> None:
    """Refuse nesting over ``MAX_JSON_DEPTH`` and strings (keys too) with a lone surrogate."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise LmspError(
                "invalid_request", f"the body nests deeper than {MAX_JSON_DEPTH} levels"
            )
        if isinstance(node, dict):
            for key, child in node.items():
                _check_text(key)
                stack.append((child, depth + 1))
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
        elif isinstance(node, str):
            _check_text(node)


def _check_text(text: str) -> None:
    if _LONE_SURROGATE.search(text):
        raise LmspError(
            "invalid_request", "the body is not valid JSON: a string has a lone surrogate"
        )


def validate_request(model: type[M], data: dict[str, Any]) -> M:
    """Validate ``data`` as ``model``; a failure becomes ``invalid_request`` naming ``param``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # Of a union's alternatives, the deepest failure is the one that names the real mistake.
        # Of equally deep ones, a tagged union's missing tag beats a literal's mismatch.
        error = max(
            exc.errors(include_url=False),
            key=lambda e: (len(e["loc"]), e["type"].startswith("union_tag")),
        )
        param = _param_path(data, error["loc"], error["type"])
        raise LmspError(
            "invalid_request", f"{param or 'body'}: {error['msg']}", param=param
        ) from None


def parse_response_request(data: dict[str, Any]) -> ResponseRequest:
    """Validate a response request and refuse the content types LMSP 1.0 reserves."""
    if isinstance(data.get("input"), list):
        data = {**data, "input": [openai_input_item(item) for item in data["input"]]}
    request = validate_request(ResponseRequest, data)
    for index, item in enumerate(request.input):
        if isinstance(item, InputMessage) and not isinstance(item.content, str):
            for part_index, part in enumerate(item.content):
                if isinstance(part, ReservedPart):
                    raise LmspError(
                        "unsupported_capability",
                        f"content type {part.type!r} is reserved and not supported in LMSP 1.0",
                        param=f"input[{index}].content[{part_index}].type",
                    )
    check_tool_choice(request)
    return _one_output_format(request)


def check_tool_choice(request: ResponseRequest) -> None:
    """Refuse a ``tool_choice`` that asks for a call of a tool the request does not offer."""
    names = {tool.name for tool in request.function_tools()}
    choice = request.tool_choice
    if choice == "required" and not request.tools:
        raise LmspError(
            "invalid_request", 'tool_choice "required" needs at least one tool', param="tool_choice"
        )
    labels = {tool.server_label for tool in request.mcp_tools()}
    if isinstance(choice, McpToolChoice) and choice.server_label not in labels:
        raise LmspError(
            "invalid_request",
            f"tool_choice names the MCP server {choice.server_label!r}, which is not in tools",
            param="tool_choice.server_label",
        )
    if isinstance(choice, NamedToolChoice) and choice.name not in names:
        raise LmspError(
            "invalid_request",
            f"tool_choice names {choice.name!r}, which is not in tools",
            param="tool_choice.name",
        )
    if isinstance(choice, AllowedToolsChoice):
        for index, allowed in enumerate(choice.tools):
            if allowed.name not in names:
                raise LmspError(
                    "invalid_request",
                    f"tool_choice allows {allowed.name!r}, which is not in tools",
                    param=f"tool_choice.tools[{index}].name",
                )


def _one_output_format(request: ResponseRequest) -> ResponseRequest:
    """``text.format`` becomes ``response_format``; both given and different → 400 (11.1)."""
    given = request.text.format if request.text is not None else None
    if given is None:
        return request
    response_format = as_response_format(given)
    if request.response_format is not None and request.response_format != response_format:
        raise LmspError(
            "invalid_request",
            "text.format and response_format ask for different output formats",
            param="text.format",
        )
    return request.model_copy(update={"response_format": response_format})


def as_response_format(
    given: TextFormat | JsonObjectFormat | TextJsonSchemaFormat,
) -> TextFormat | JsonSchemaFormat:
    """An OpenAI output format as the ``response_format`` that does it."""
    if isinstance(given, TextFormat):
        return given
    if isinstance(given, JsonObjectFormat):
        spec = JsonSchemaSpec(name="json_object", schema_={"type": "object"})
    else:
        spec = JsonSchemaSpec(
            name=given.name,
            description=given.description,
            schema_=given.schema_,
            strict=given.strict if given.strict is not None else True,
        )
    return JsonSchemaFormat(type="json_schema", json_schema=spec)


def _param_path(data: Any, loc: tuple[int | str, ...], kind: str) -> str:
    """The path of ``loc`` in ``data`` (``input[0].content``), skipping pydantic's union tags."""
    path = ""
    node = data
    tag_seen = False  # a field may share its name with the tag just before it
    for step in loc:
        if isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            path, node, tag_seen = f"{path}[{step}]", node[step], False
        elif isinstance(node, dict) and isinstance(step, str) and step in node:
            path, node, tag_seen = _join(path, step), node[step], False
        elif isinstance(node, dict) and isinstance(step, str):
            if step == node.get("type") and not tag_seen:
                tag_seen = True
            elif _FIELD_NAME.match(step) and step not in _TYPE_NAMES:
                path, node = _join(path, step), None
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        path = _join(path, "type")
    return path


_FIELD_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_TYPE_NAMES = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
