"""OpenAI's Embeddings (LMSP 1.0 section 11.5): the request and the list of vectors. Pure data."""

from __future__ import annotations

import base64
import struct
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .items import MAX_TEXT_CHARS
from .models import ModelName

#: Texts one request may embed.
MAX_INPUTS = 2048

EmbeddingText = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]


class EmbeddingRequest(BaseModel):
    """``POST /lmsp/v1/embeddings``: one text or several (token arrays are not served)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: ModelName
    input: (
        EmbeddingText | Annotated[list[EmbeddingText], Field(min_length=1, max_length=MAX_INPUTS)]
    )
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(
        default=None, ge=1, description="Only the model's own number of dimensions."
    )
    user: str | None = Field(default=None, max_length=512, description="Ignored.")
    extensions: dict[str, Any] | None = Field(
        default=None,
        description='This service\'s own under "x-lmsp-jupyter": keep_alive_seconds, how long '
        "the model stays loaded once idle after this request; other keys are ignored.",
    )

    def texts(self) -> list[str]:
        """``input`` as a list."""
        return [self.input] if isinstance(self.input, str) else list(self.input)


class Embedding(BaseModel):
    """One text's vector: floats, or base64 of little-endian float32 values."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    """The tokens the texts took."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    """The answer: a vector per text, in order."""

    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


def embedding_list(
    model: str, vectors: list[list[float]], tokens: int, encoding: Literal["float", "base64"]
) -> EmbeddingList:
    """The answer of ``vectors``, encoded as asked."""
    return EmbeddingList(
        data=[
            Embedding(index=index, embedding=_base64(vector) if encoding == "base64" else vector)
            for index, vector in enumerate(vectors)
        ],
        model=model,
        usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
    )


def _base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
