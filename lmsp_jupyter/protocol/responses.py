"""The response object (LMSP 1.0 section 6.2, with what section 11.4 adds)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .errors import Problem
from .items import OutputItem
from .prediction import UsageExtension

#: ``queued`` only for a background response (11.2) that has not started.
ResponseStatus = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
IncompleteReason = Literal["max_output_tokens", "content_filter", "context_length"]


class InputTokensDetails(BaseModel):
    """What the input tokens were made of."""

    cached_tokens: int = Field(0, description="Prompt tokens served from a cached prefix.")


class OutputTokensDetails(BaseModel):
    """What the output tokens were made of."""

    reasoning_tokens: int = Field(0, description="Tokens of reasoning items.")


class Usage(BaseModel):
    """Token counts, in the model's own tokens."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    extensions: dict[Literal["x-lmsp-jupyter"], UsageExtension] | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="Tokens verified from drafts, when the engine drafted.",
    )


class IncompleteDetails(BaseModel):
    """Why a response stopped early."""

    reason: IncompleteReason


class Response(BaseModel):
    """A model's answer to one request, with the settings it was made with (11.4)."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    usage: Usage | None = None
    error: Problem | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    previous_response_id: str | None = None
    store: bool = False
    background: bool = False
    text: dict[str, Any] = Field(
        default_factory=lambda: {"format": {"type": "text"}},
        description="The output format used, as `text.format` of the request.",
    )
