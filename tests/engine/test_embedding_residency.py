"""Embedding models under the model manager's rules, with a scripted engine and embedders that
record what they load (the real model's side: tests/server/test_embedding_lifecycle.py):
counted in the memory budget beside generative models, evicted when idle, never in use, kept
for their keep-alive and unloaded on close."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from lmsp_jupyter.engine.catalog import ModelCatalog, ModelEntry
from lmsp_jupyter.engine.embedding import Embedder, Embedders, InputTooLong
from lmsp_jupyter.engine.manager import ModelManager
from lmsp_jupyter.protocol.errors import LmspError
from tests.doubles import ScriptedEngine
from tests.engine.gguf_files import write_gguf
from tests.helpers import eventually_async


class RecordedEmbedder:
    """An embedder whose vectors are the texts' lengths; it notes when it is closed."""

    def __init__(self, path: Path, closed: list[Path]) -> None:
        self.path = path
        self.closed = closed

    def count(self, text: str) -> int:
        return len(text.split())

    def embed(self, texts: Sequence[str], truncate: bool = False) -> tuple[list[list[float]], int]:
        return [[float(len(text)), 0.0] for text in texts], sum(map(self.count, texts))

    def close(self) -> None:
        self.closed.append(self.path)


class Recorder:
    """The factory :class:`Embedders` loads with: what it loaded (path, pooling), what closed."""

    def __init__(self) -> None:
        self.loaded: list[tuple[Path, str | None]] = []
        self.closed: list[Path] = []

    def __call__(self, path: Path, pooling: str | None, window: int, threads: int) -> Embedder:
        self.loaded.append((path, pooling))
        return RecordedEmbedder(path, self.closed)


@pytest.fixture
def entries(tmp_path: Path) -> tuple[ModelEntry, ModelEntry]:
    """A BERT GGUF (``bge``) and a llama one (``tiny``), header only."""
    write_gguf(tmp_path / "bge.gguf", {"general.architecture": "bert", "bert.context_length": 512})
    write_gguf(
        tmp_path / "tiny.gguf", {"general.architecture": "llama", "llama.context_length": 512}
    )
    catalog = ModelCatalog(model_dirs=[tmp_path], include_bundled=False)
    return catalog.get("bge"), catalog.get("tiny")


def managed(**traits: float) -> tuple[ModelManager, Embedders, Recorder]:
    """A manager of ``traits`` over a scripted engine, its embedders and what they loaded."""
    recorder = Recorder()
    embedders = Embedders(recorder, threads=1, pooling={"tiny": "mean"})
    return ModelManager(ScriptedEngine(), embedders=embedders, **traits), embedders, recorder


async def test_an_embedding_model_is_loaded_through_the_manager_and_listed(
    entries: tuple[ModelEntry, ModelEntry],
) -> None:
    bge, _ = entries
    manager, embedders, recorder = managed(keep_alive_seconds=-1)
    with pytest.raises(Exception, match="not loaded to embed"):
        await embedders.embed(bge, ["a"])  # nothing loads behind the manager's back
    async with manager.use(bge, role="embedding"):
        vectors, _ = await embedders.embed(bge, ["abc", "de"])
    assert vectors == [[3.0, 0.0], [2.0, 0.0]]
    assert recorder.loaded == [(bge.path(), None)]
    state = manager.state("bge")
    assert state is not None and state.status == "loaded" and state.expires_at is None
    assert state.memory_bytes == embedders.footprint(bge) > 0
    await manager.close()
    assert recorder.closed == [bge.path()] and manager.state("bge") is None


async def test_a_text_may_have_no_more_tokens_than_the_model_was_trained_for(
    entries: tuple[ModelEntry, ModelEntry],
) -> None:
    bge, _ = entries  # trained for 512 positions, under the embedding window
    embedders = Embedders(Recorder(), threads=1)
    await embedders.load(bge)
    vectors, tokens = await embedders.embed(bge, ["word " * 600], truncate=True)
    assert tokens == 512 and len(vectors) == 1
    with pytest.raises(InputTooLong, match="512 at most"):
        await embedders.embed(bge, ["word " * 513])
    await embedders.unload("bge")


async def test_a_generative_model_embeds_in_its_own_role_with_its_pooling(
    entries: tuple[ModelEntry, ModelEntry],
) -> None:
    _, tiny = entries
    manager, embedders, recorder = managed(keep_alive_seconds=-1)
    await manager.load(tiny)
    generating = manager.state("tiny")
    await manager.load(tiny, role="embedding")
    both = manager.state("tiny")
    assert generating is not None and both is not None
    assert both.memory_bytes == generating.memory_bytes + embedders.footprint(tiny)
    assert recorder.loaded == [(tiny.path(), "mean")]
    await manager.unload("tiny")  # every role
    assert manager.state("tiny") is None and recorder.closed == [tiny.path()]


async def test_idle_models_make_room_for_an_embedding_model_but_one_in_use_does_not(
    entries: tuple[ModelEntry, ModelEntry],
) -> None:
    bge, tiny = entries
    sizes = Embedders(Recorder(), threads=1)
    room_for_one = max(sizes.footprint(bge), sizes.footprint(tiny))
    manager, _, recorder = managed(keep_alive_seconds=-1, memory_budget_bytes=room_for_one)
    await manager.load(tiny, role="embedding")
    await manager.load(bge, role="embedding")  # tiny is idle: unloaded for bge
    assert manager.state("tiny") is None and recorder.closed == [tiny.path()]
    async with manager.use(bge, role="embedding"):
        with pytest.raises(LmspError) as caught:
            await manager.load(tiny, role="embedding")
        assert caught.value.code == "overloaded" and "'bge' (embedding" in str(caught.value)
    assert manager.state("bge") is not None
    await manager.close()


async def test_an_idle_embedding_model_is_unloaded_after_its_keep_alive(
    entries: tuple[ModelEntry, ModelEntry],
) -> None:
    bge, _ = entries
    manager, embedders, recorder = managed(keep_alive_seconds=-1)
    await manager.load(bge, keep_alive=0, role="embedding")

    async def unloaded() -> bool:
        await asyncio.sleep(0)
        return manager.state("bge") is None

    await eventually_async(unloaded, what="the embedding model unloaded")
    assert recorder.closed == [bge.path()] and not embedders.is_loaded("bge")
