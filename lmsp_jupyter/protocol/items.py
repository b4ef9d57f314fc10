"""Input and output items and their content parts (LMSP 1.0 sections 6.1 and 6.2)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .logprobs import Logprob, omitted_if_none

MAX_TEXT_CHARS = 4 * 1024 * 1024
MAX_ITEMS = 10_000


class _Strict(BaseModel):
    # strict: "5" is not an integer and 1 is not a boolean; a wrong type is a client's mistake.
    model_config = ConfigDict(extra="forbid", strict=True)


class InputText(_Strict):
    """Text given to the model."""

    type: Literal["input_text"]
    text: str = Field(max_length=MAX_TEXT_CHARS)


class OutputText(_Strict):
    """Text the model wrote."""

    type: Literal["output_text"] = "output_text"
    text: str = Field(max_length=MAX_TEXT_CHARS)
    #: Always empty here; accepted back as the SDKs send it (11.1, 11.4).
    annotations: list[Any] = Field(default_factory=list, max_length=MAX_ITEMS)
    #: The tokens' logprobs, when asked for (``include``, 11.1); left out otherwise.
    logprobs: list[Logprob] | None = Field(default=None, exclude_if=omitted_if_none)


class ReservedPart(BaseModel):
    """A part type LMSP 1.0 reserves: parsed, then refused as ``unsupported_capability``."""

    model_config = ConfigDict(extra="allow")

    type: Literal["input_image", "input_audio", "input_file"]


RESERVED_PART_TYPES = ("input_image", "input_audio", "input_file")

#: An item's state: in ``response.output_item.added`` it is still being written (11.4).
ItemStatus = Literal["in_progress", "completed", "incomplete"]

ContentPart = Annotated[InputText | OutputText | ReservedPart, Field(discriminator="type")]


class InputMessage(_Strict):
    """A message in the request's input; ``content`` may be a plain string."""

    type: Literal["message"] = "message"
    id: str | None = None
    role: Literal["system", "user", "assistant"]
    status: ItemStatus | None = None
    content: (
        Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
        | Annotated[list[ContentPart], Field(max_length=MAX_ITEMS)]
    )

    def text(self) -> str:
        """The message's text, its parts joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if not isinstance(part, ReservedPart))


class FunctionCall(_Strict):
    """A call of a client-executed function tool, as the model produced it."""

    type: Literal["function_call"] = "function_call"
    id: str | None = None
    call_id: str = Field(max_length=255)
    name: str = Field(max_length=255)
    arguments: str = Field(max_length=MAX_TEXT_CHARS)
    status: ItemStatus | None = None


class FunctionCallOutput(_Strict):
    """The client's result of running a function tool."""

    type: Literal["function_call_output"]
    id: str | None = None
    call_id: str = Field(max_length=255)
    output: str = Field(max_length=MAX_TEXT_CHARS)
    status: ItemStatus | None = None

    @field_validator("output", mode="before")
    @classmethod
    def _text_parts_are_their_text(cls, value: Any) -> Any:
        # The SDKs may send the output as input_text parts (11.1).
        if isinstance(value, list) and all(_is_text_part(part) for part in value):
            return "".join(part["text"] for part in value)
        return value


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "input_text" and "text" in part


class ItemReference(_Strict):
    """An item of a stored response, named by its id (11.1); the service puts the item here."""

    type: Literal["item_reference"]
    id: str = Field(min_length=1, max_length=255)


class SummaryText(_Strict):
    """One part of a reasoning summary."""

    type: Literal["summary_text"] = "summary_text"
    text: str = Field(max_length=MAX_TEXT_CHARS)


class Reasoning(_Strict):
    """Reasoning the model wrote before its answer."""

    type: Literal["reasoning"] = "reasoning"
    id: str | None = None
    summary: list[SummaryText] = Field(default_factory=list, max_length=MAX_ITEMS)
    status: ItemStatus | None = None


class McpToolInfo(BaseModel):
    """A tool an MCP server offers, as its listing says (11.6)."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(max_length=255)
    description: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    input_schema: dict[str, Any] = Field(default_factory=dict)
    annotations: dict[str, Any] | None = None


class McpListTools(_Strict):
    """The tools of an MCP server, listed for the model (11.6); ``error`` when it could not
    be listed."""

    type: Literal["mcp_list_tools"] = "mcp_list_tools"
    id: str | None = None
    server_label: str = Field(max_length=255)
    tools: list[McpToolInfo] = Field(default_factory=list, max_length=MAX_ITEMS)
    error: str | None = None
    status: ItemStatus | None = None


class McpCall(_Strict):
    """A call of an MCP server's tool that the service ran (11.6): its ``output``, or the
    ``error`` of a call that failed."""

    type: Literal["mcp_call"] = "mcp_call"
    id: str | None = None
    server_label: str = Field(max_length=255)
    name: str = Field(max_length=255)
    arguments: str = Field(max_length=MAX_TEXT_CHARS)
    output: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    error: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    #: The approval request it answers, if it needed one.
    approval_request_id: str | None = Field(default=None, max_length=255)
    status: ItemStatus | None = None


class McpApprovalRequest(_Strict):
    """A call of an MCP tool the model asked for, waiting for the user's approval (11.6)."""

    type: Literal["mcp_approval_request"] = "mcp_approval_request"
    id: str = Field(max_length=255)
    server_label: str = Field(max_length=255)
    name: str = Field(max_length=255)
    arguments: str = Field(max_length=MAX_TEXT_CHARS)
    status: ItemStatus | None = None


class McpApprovalResponse(_Strict):
    """The user's answer to an ``mcp_approval_request`` (11.6)."""

    type: Literal["mcp_approval_response"]
    id: str | None = None
    approval_request_id: str = Field(min_length=1, max_length=255)
    approve: bool
    reason: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)


#: The MCP items (11.6), as they come back in a request's input.
McpItem = McpListTools | McpCall | McpApprovalRequest | McpApprovalResponse

InputItem = Annotated[
    InputMessage
    | FunctionCall
    | FunctionCallOutput
    | Reasoning
    | ItemReference
    | McpListTools
    | McpCall
    | McpApprovalRequest
    | McpApprovalResponse,
    Field(discriminator="type"),
]


class OutputMessage(_Strict):
    """The assistant's message in a response."""

    type: Literal["message"] = "message"
    id: str
    role: Literal["assistant"] = "assistant"
    status: ItemStatus = "completed"
    content: list[OutputText] = Field(default_factory=list)


class OutputFunctionCall(FunctionCall):
    """A function call in a response; it always has an ``id`` and a ``status``."""

    id: str
    status: ItemStatus = "completed"


class OutputReasoning(Reasoning):
    """A reasoning item in a response; it always has an ``id`` and a ``status``."""

    id: str
    status: ItemStatus = "completed"


class OutputMcpListTools(McpListTools):
    """An ``mcp_list_tools`` item in a response; it always has an ``id``."""

    id: str
    status: ItemStatus = "completed"


class OutputMcpCall(McpCall):
    """An ``mcp_call`` item in a response; it always has an ``id``."""

    id: str
    status: ItemStatus = "completed"


class OutputMcpApprovalRequest(McpApprovalRequest):
    """An ``mcp_approval_request`` item in a response."""

    status: ItemStatus = "completed"


OutputItem = Annotated[
    OutputMessage
    | OutputFunctionCall
    | OutputReasoning
    | OutputMcpListTools
    | OutputMcpCall
    | OutputMcpApprovalRequest,
    Field(discriminator="type"),
]


def as_input_item(item: OutputItem) -> InputItem:
    """An output item as the input item that carries it into the next turn."""
    if isinstance(item, OutputMessage):
        return InputMessage(role="assistant", content=list(item.content))
    if isinstance(item, OutputFunctionCall):
        return FunctionCall.model_validate(item.model_dump(exclude={"status"}))
    if isinstance(item, OutputMcpListTools):
        return McpListTools.model_validate(item.model_dump(exclude={"status"}))
    if isinstance(item, OutputMcpCall):
        return McpCall.model_validate(item.model_dump(exclude={"status"}))
    if isinstance(item, OutputMcpApprovalRequest):
        return McpApprovalRequest.model_validate(item.model_dump(exclude={"status"}))
    return Reasoning.model_validate(item.model_dump(exclude={"status"}))
