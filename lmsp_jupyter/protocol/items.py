"""Input and output items and their content parts (LMSP 1.0 sections 6.1 and 6.2)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

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


class ReservedPart(BaseModel):
    """A part type LMSP 1.0 reserves: parsed, then refused as ``unsupported_capability``."""

    model_config = ConfigDict(extra="allow")

    type: Literal["input_image", "input_audio", "input_file"]


RESERVED_PART_TYPES = ("input_image", "input_audio", "input_file")

ContentPart = Annotated[InputText | OutputText | ReservedPart, Field(discriminator="type")]


class InputMessage(_Strict):
    """A message in the request's input; ``content`` may be a plain string."""

    type: Literal["message"] = "message"
    id: str | None = None
    role: Literal["system", "user", "assistant"]
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


class FunctionCallOutput(_Strict):
    """The client's result of running a function tool."""

    type: Literal["function_call_output"]
    call_id: str = Field(max_length=255)
    output: str = Field(max_length=MAX_TEXT_CHARS)


class SummaryText(_Strict):
    """One part of a reasoning summary."""

    type: Literal["summary_text"] = "summary_text"
    text: str = Field(max_length=MAX_TEXT_CHARS)


class Reasoning(_Strict):
    """Reasoning the model wrote before its answer."""

    type: Literal["reasoning"] = "reasoning"
    id: str | None = None
    summary: list[SummaryText] = Field(default_factory=list, max_length=MAX_ITEMS)


InputItem = Annotated[
    InputMessage | FunctionCall | FunctionCallOutput | Reasoning, Field(discriminator="type")
]


class OutputMessage(_Strict):
    """The assistant's message in a response."""

    type: Literal["message"] = "message"
    id: str
    role: Literal["assistant"] = "assistant"
    content: list[OutputText] = Field(default_factory=list)


class OutputFunctionCall(FunctionCall):
    """A function call in a response; it always has an ``id``."""

    id: str


class OutputReasoning(Reasoning):
    """A reasoning item in a response; it always has an ``id``."""

    id: str


OutputItem = Annotated[
    OutputMessage | OutputFunctionCall | OutputReasoning, Field(discriminator="type")
]


def as_input_item(item: OutputItem) -> InputItem:
    """An output item as the input item that carries it into the next turn."""
    if isinstance(item, OutputMessage):
        return InputMessage(role="assistant", content=list(item.content))
    if isinstance(item, OutputFunctionCall):
        return FunctionCall.model_validate(item.model_dump())
    return Reasoning.model_validate(item.model_dump())
