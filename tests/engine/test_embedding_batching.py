"""Embedding requests gathered into shared llama.cpp batches, with the real bundled model and
mean pooling (``engine/embedding.py``, ``engine.local.llama.embedder.LlamaEmbedder``): concurrent
requests and the texts of one request are read together, and each text keeps its own vector
(the same text alone or in a batch, up to its last bits: :data:`tests.helpers.SAME_TEXT_COSINE`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog, ModelEntry
from lmsp_jupyter.engine.embedding import (
    EMBEDDING_WINDOW,
    Embedder,
    Embedders,
    InputTooLong,
)
from lmsp_jupyter.engine.local.llama.embedder import EMBEDDING_PASS_TOKENS, LlamaEmbedder
from tests.helpers import same_text

SHORT = ["The cat sat on the mat.", "Stock prices fell sharply today.", "A kitten rests."]


class Recording:
    """The real embedder, noting the texts of each call (one call: the texts read together)."""

    def __init__(self, inner: Embedder, calls: list[int]) -> None:
        self.inner = inner
        self.calls = calls

    def count(self, text: str) -> int:
        return self.inner.count(text)

    def embed(self, texts: Sequence[str], truncate: bool = False) -> tuple[list[list[float]], int]:
        self.calls.append(len(texts))
        return self.inner.embed(texts, truncate)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture(scope="module")
def entry(bundled_model_path: Path) -> ModelEntry:
    return ModelCatalog().get(BUNDLED_MODEL_ID)


@pytest.fixture
def embedders(entry: ModelEntry) -> Iterator[tuple[Embedders, list[int]]]:
    """Embedders of the bundled model with mean pooling (each test loads it); the sizes of
    its calls."""
    calls: list[int] = []

    def load(path: Path, pooling: str | None, window: int, threads: int) -> Embedder:
        return Recording(LlamaEmbedder(path, pooling, window, threads), calls)

    embedders = Embedders(load, threads=2, pooling={entry.id: "mean"})
    yield embedders, calls
    embedders.close()


def sized(embedders: Embedders, entry: ModelEntry, tokens: int) -> str:
    """A text of exactly ``tokens`` tokens (its BOS among them)."""
    model = embedders._models[entry.id]
    text = " ".join(["word"] * (tokens - 1))
    assert model.count(text) == tokens
    return text


async def test_concurrent_requests_share_passes_and_keep_their_vectors(
    embedders: tuple[Embedders, list[int]], entry: ModelEntry
) -> None:
    service, calls = embedders
    await service.load(entry)
    long_texts = [sized(service, entry, 258), sized(service, entry, 120)]
    texts = [*SHORT, *long_texts]
    alone = [(await service.embed(entry, [text]))[0][0] for text in texts]
    assert calls == [1] * len(texts)
    calls.clear()

    answers = await asyncio.gather(*(service.embed(entry, [text]) for text in texts))
    assert calls == [len(texts)]  # every request in one call: the passes are shared
    gathered = [vectors[0] for vectors, _ in answers]
    # each text its own vector, up to the last bits the batch changes
    assert all(same_text(a, b) for a, b in zip(gathered, alone, strict=True))
    assert not same_text(gathered[0], gathered[1])  # cat and stocks
    assert [tokens for _, tokens in answers] == [service._models[entry.id].count(t) for t in texts]

    calls.clear()
    together, tokens = await service.embed(entry, texts)  # the texts of one request
    assert together == gathered and calls == [len(texts)]  # the same batch: the same bits
    assert tokens == sum(count for _, count in answers)


async def test_a_refused_or_abandoned_request_leaves_the_others_their_vectors(
    embedders: tuple[Embedders, list[int]], entry: ModelEntry
) -> None:
    service, calls = embedders
    await service.load(entry)
    alone = (await service.embed(entry, [SHORT[0]]))[0][0]
    too_long = "word " * (EMBEDDING_WINDOW + 10)
    blocker = asyncio.ensure_future(service.embed(entry, [SHORT[1]]))
    await asyncio.sleep(0)  # it is being embedded: the next requests wait together
    refused = asyncio.ensure_future(service.embed(entry, [SHORT[2], too_long]))
    left = asyncio.ensure_future(service.embed(entry, [SHORT[2]]))
    kept = asyncio.ensure_future(service.embed(entry, [SHORT[0]]))
    cut = asyncio.ensure_future(service.embed(entry, [too_long], truncate=True))
    await asyncio.sleep(0)
    left.cancel()  # its client left before its pass
    await blocker
    with pytest.raises(InputTooLong) as caught:
        await refused
    assert caught.value.index == 1
    assert same_text((await kept)[0][0], alone)
    assert (await cut)[1] == EMBEDDING_WINDOW
    assert left.cancelled()
    assert calls[-1] == 2  # the refused and the abandoned requests read nothing


def test_the_texts_of_a_call_are_read_in_passes_of_bounded_size(entry: ModelEntry) -> None:
    """Short texts share a pass up to EMBEDDING_PASS_TOKENS tokens (cheaper a token than one
    long pass); a text over that takes a pass alone; the texts keep their order."""
    embedder = LlamaEmbedder(entry.path(), "mean", EMBEDDING_WINDOW, 2)
    try:
        long_text = " ".join(["word"] * (EMBEDDING_PASS_TOKENS + 40))
        texts = [*SHORT * 20, long_text, *SHORT]
        tokenized = [embedder.tokens(text) for text in texts]
        passes = list(embedder._passes(tokenized))
        assert [tokens for of_pass in passes for tokens in of_pass] == tokenized
        assert [tokenized[-4]] in passes and len(passes) > 2
        for of_pass in passes:
            tokens = sum(len(of_text) for of_text in of_pass)
            assert tokens <= EMBEDDING_PASS_TOKENS or len(of_pass) == 1
        vectors, tokens = embedder.embed(texts)
        assert tokens == sum(embedder.count(text) for text in texts)
        alone = [embedder.embed([text])[0][0] for text in [*SHORT, long_text]]
        assert all(same_text(a, b) for a, b in zip(vectors[:3], alone[:3], strict=True))
        assert same_text(vectors[-4], alone[-1])
    finally:
        embedder.close()
