"""Embeddings: each embedding model loaded by the model manager, and run on its own thread.

A model embeds with its GGUF's own pooling (BERT-family and Nomic GGUFs, EmbeddingGemma), or,
for a generative model an operator names (``LmspApp.embedding_models``), with the pooling named
there. All the texts of a request are decoded together, as many per batch as fit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from .catalog import ModelEntry
from .generation import EngineError
from .memory import footprint

#: GGUF architectures of models made to embed (they do not generate).
EMBEDDING_ARCHITECTURES = frozenset(
    {
        "bert",
        "nomic-bert",
        "nomic-bert-moe",
        "jina-bert-v2",
        "jina-bert-v3",
        "modern-bert",
        "neo-bert",
        "t5encoder",
        "gemma-embedding",
    }
)
#: Tokens one text may have: each is pooled from one batch.
EMBEDDING_WINDOW = 2048


class InputTooLong(EngineError):
    """A text has more tokens than an embedding takes."""

    def __init__(self, index: int, tokens: int, window: int) -> None:
        super().__init__(f"input {index} has {tokens} tokens; an embedding takes {window} at most")
        self.index = index


class Embedder(Protocol):
    """A model loaded to embed (``engine.local.llama.LlamaEmbedder``)."""

    def count(self, text: str) -> int:
        """The tokens of ``text``."""
        ...

    def embed(self, texts: Sequence[str], truncate: bool = False) -> tuple[list[list[float]], int]:
        """The normalized vectors of ``texts`` and their tokens; ``truncate``: each text cut to
        the window first."""
        ...

    def close(self) -> None:
        """Free the model."""
        ...


#: Loads an embedder: the GGUF, its pooling (``None``: its own), the window, threads.
EmbedderFactory = Callable[[Path, str | None, int, int], Embedder]


class Embedders:
    """The loaded embedding models, one thread each: the model manager loads and unloads
    them (:mod:`.manager`, role ``embedding``), :meth:`embed` uses one loaded. ``load`` builds
    one (the app passes llama.cpp's, so that nothing here loads llama.cpp before a model
    embeds); ``pooling`` names the pooling of the generative models that embed."""

    def __init__(
        self,
        load: EmbedderFactory,
        threads: int,
        pooling: Mapping[str, str] | None = None,
        window: int = EMBEDDING_WINDOW,
    ) -> None:
        self.factory = load
        self.threads = threads
        self.pooling = dict(pooling or {})
        self.window = window
        self._executors: dict[str, ThreadPoolExecutor] = {}
        self._models: dict[str, Embedder] = {}

    def footprint(self, entry: ModelEntry) -> int:
        """Bytes ``entry`` takes loaded to embed: its weights and one window's KV cache."""
        return footprint(entry.weights_bytes, entry.kv_bytes_per_token, self.window, 1)

    def is_loaded(self, model_id: str) -> bool:
        """Whether the model is loaded to embed."""
        return model_id in self._models

    async def load(self, entry: ModelEntry) -> None:
        """Load ``entry`` to embed, on its own thread (nothing happens if it is loaded)."""
        if entry.source == "remote":
            raise EngineError(f"model {entry.id!r} runs on a remote server, which embeds nothing")
        executor = self._executors.get(entry.id)
        if executor is None:
            executor = ThreadPoolExecutor(1, thread_name_prefix=f"lmsp-embed-{entry.id}")
            self._executors[entry.id] = executor
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(executor, self._load, entry)

    def _load(self, entry: ModelEntry) -> None:
        if entry.id not in self._models:
            pooling = self.pooling.get(entry.id)
            self._models[entry.id] = self.factory(entry.path(), pooling, self.window, self.threads)

    async def unload(self, model_id: str) -> None:
        """Free the model once its thread is idle (called while nothing embeds with it)."""
        executor = self._executors.pop(model_id, None)
        model = self._models.pop(model_id, None)
        if executor is None:
            return
        if model is not None:
            await asyncio.get_running_loop().run_in_executor(executor, model.close)
        executor.shutdown(wait=False)

    async def embed(
        self, entry: ModelEntry, texts: Sequence[str], truncate: bool = False
    ) -> tuple[list[list[float]], int]:
        """The normalized vectors of ``texts`` and their tokens, by ``entry`` loaded to embed
        (:meth:`load`); a text over the window is cut to it with ``truncate``, else raises
        :class:`InputTooLong`."""
        executor = self._executors.get(entry.id)
        if executor is None or entry.id not in self._models:
            raise EngineError(f"model {entry.id!r} is not loaded to embed")
        model = self._models[entry.id]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, self._embed, model, list(texts), truncate)

    def _embed(
        self, model: Embedder, texts: list[str], truncate: bool
    ) -> tuple[list[list[float]], int]:
        for index, text in enumerate(texts):
            tokens = 0 if truncate else model.count(text)
            if tokens > self.window:
                raise InputTooLong(index, tokens, self.window)
        return model.embed(texts, truncate)

    def close(self) -> None:
        """Free every model once its thread is idle."""
        executors, self._executors = self._executors, {}
        for model_id, executor in executors.items():
            model = self._models.pop(model_id, None)
            if model is not None:
                executor.submit(model.close)
            executor.shutdown(wait=False)
