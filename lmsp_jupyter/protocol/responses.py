"""The response object (LMSP 1.0 section 6.2)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .errors import Problem
from .items import OutputItem

ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed", "cancelled"]
IncompleteReason = Literal["max_output_tokens", "content_filter", "context_length"]


class Usage(BaseModel):
    """Token counts, in the model's own tokens."""

    input_tokens: int
    output_tokens: int
    total_tokens: int


class IncompleteDetails(BaseModel):
    """Why a response stopped early."""

    reason: IncompleteReason


class Response(BaseModel):
    """A model's answer to one request."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    usage: Usage | None = None
    error: Problem | None = None
    incomplete_details: IncompleteDetails | None = None
