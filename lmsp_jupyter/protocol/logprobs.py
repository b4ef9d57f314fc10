"""Token logprobs as OpenAI shapes them (LMSP 1.0 section 11): on Chat Completions' choices
and chunks, and on Responses' ``output_text`` parts and text deltas. Pure data."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

#: The ``include`` value that asks ``/responses`` for logprobs on ``output_text`` parts.
LOGPROBS_INCLUDE = "message.output_text.logprobs"
#: Alternatives a request may ask for per token (OpenAI's bound).
MAX_TOP_LOGPROBS = 20
#: ``top_logprobs``: how many alternatives each token comes with.
TopLogprobs = Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)]


class TopLogprob(BaseModel):
    """One of the most likely tokens at a position: its text, logprob and UTF-8 bytes."""

    token: str
    logprob: float
    bytes: list[int] | None = None


class Logprob(TopLogprob):
    """An output token's logprob, and the most likely tokens at its position (most likely
    first). Of the distribution the token was drawn from: after the penalties, before the
    temperature and the top-k/top-p/min-p cut; under a JSON Schema, masked to the tokens the
    schema allowed (a token the schema forced has logprob 0)."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list)


def omitted_if_none(value: Any) -> bool:
    """Whether a field is left out of a document (logprobs that were not asked for)."""
    return value is None
