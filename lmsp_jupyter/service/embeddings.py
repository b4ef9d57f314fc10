"""Embeddings of texts by the models that have the ``embedding`` capability."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..engine.catalog import ModelEntry
from ..engine.embedding import Embedders, InputTooLong
from ..engine.generation import EngineError
from ..protocol.errors import LmspError
from .engine_errors import engine_problem
from .models import ModelDirectory


@dataclass(frozen=True)
class Embeddings:
    """A vector per text, normalized, and the tokens the texts took."""

    vectors: list[list[float]]
    tokens: int


class EmbeddingService:
    """Checks that a model embeds and has it embed, all the texts of a request together."""

    def __init__(self, models: ModelDirectory, embedders: Embedders) -> None:
        self.models = models
        self.embedders = embedders

    async def embed(
        self,
        entry: ModelEntry,
        texts: Sequence[str],
        *,
        param: str = "input",
        keep_alive: float | None = None,
        truncate: bool = False,
    ) -> Embeddings:
        """The vectors of ``texts`` (each within the embedding window, else
        ``context_length_exceeded`` naming it in ``param``); no texts: the model is only
        loaded. The model is loaded to embed
        through the model manager (in its memory budget, ``overloaded`` when it cannot fit);
        ``keep_alive`` (seconds) replaces its keep-alive once idle. ``truncate``: a text over
        the window is cut to it instead."""
        self.check(entry)
        try:
            async with self.models.manager.use(entry, keep_alive, role="embedding"):
                if not texts:
                    return Embeddings([], 0)
                vectors, tokens = await self.embedders.embed(entry, texts, truncate)
        except InputTooLong as exc:
            where = f"{param}[{exc.index}]" if len(texts) > 1 else param
            raise LmspError("context_length_exceeded", str(exc), param=where) from None
        except EngineError as exc:
            raise engine_problem(exc) from None
        return Embeddings(vectors, tokens)

    def check(self, entry: ModelEntry) -> None:
        """Refuse a model without the ``embedding`` capability (``unsupported_capability``)."""
        if "embedding" not in self.models.capabilities(entry):
            raise LmspError(
                "unsupported_capability",
                f"model {entry.id!r} has no 'embedding' capability",
                param="model",
            )

    def close(self) -> None:
        """Free the embedding models the manager left loaded (those in use at shutdown)."""
        self.embedders.close()


def check_dimensions(embeddings: Embeddings, dimensions: int | None) -> None:
    """Refuse ``dimensions`` other than the model's own (vectors are not shortened)."""
    if dimensions is None or not embeddings.vectors:
        return
    size = len(embeddings.vectors[0])
    if dimensions != size:
        raise LmspError(
            "invalid_request",
            f"this model's vectors have {size} dimensions; no other number is served",
            param="dimensions",
        )
