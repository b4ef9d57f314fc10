"""Embeddings: each embedding model loaded on first use, on its own thread.

A model embeds with its GGUF's own pooling (BERT-family and Nomic GGUFs, EmbeddingGemma), or,
for a generative model an operator names (``LmspApp.embedding_models``), with the pooling named
there. All the texts of a request are decoded together, as many per batch as fit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from .catalog import ModelEntry
from .generation import EngineError

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

    def embed(self, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        """The normalized vectors of ``texts`` and their tokens."""
        ...

    def close(self) -> None:
        """Free the model."""
        ...


#: Loads an embedder: the GGUF, its pooling (``None``: its own), the window, threads.
EmbedderFactory = Callable[[Path, str | None, int, int], Embedder]


class Embedders:
    """The loaded embedding models, one thread each. ``load`` builds one (the app passes
    llama.cpp's, so that nothing here loads llama.cpp before a model embeds)."""

    def __init__(self, load: EmbedderFactory, threads: int, window: int = EMBEDDING_WINDOW) -> None:
        self.load = load
        self.threads = threads
        self.window = window
        self._lock = threading.Lock()
        self._executors: dict[str, ThreadPoolExecutor] = {}
        self._models: dict[str, Embedder] = {}

    async def embed(
        self, entry: ModelEntry, pooling: str | None, texts: Sequence[str]
    ) -> tuple[list[list[float]], int]:
        """The normalized vectors of ``texts`` and their tokens, in ``entry``'s pooling (or
        ``pooling``); a text over the window raises :class:`InputTooLong`."""
        if entry.source == "remote":
            raise EngineError(f"model {entry.id!r} runs on a remote server, which embeds nothing")
        with self._lock:
            executor = self._executors.get(entry.id)
            if executor is None:
                executor = ThreadPoolExecutor(1, thread_name_prefix=f"lmsp-embed-{entry.id}")
                self._executors[entry.id] = executor
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor, self._embed, entry, pooling, list(texts))

    def _embed(
        self, entry: ModelEntry, pooling: str | None, texts: list[str]
    ) -> tuple[list[list[float]], int]:
        model = self._models.get(entry.id)
        if model is None:
            model = self.load(entry.path(), pooling, self.window, self.threads)
            self._models[entry.id] = model
        for index, text in enumerate(texts):
            tokens = model.count(text)
            if tokens > self.window:
                raise InputTooLong(index, tokens, self.window)
        return model.embed(texts)

    def close(self) -> None:
        """Free every model once its thread is idle."""
        with self._lock:
            executors, self._executors = self._executors, {}
        for model_id, executor in executors.items():
            model = self._models.pop(model_id, None)
            if model is not None:
                executor.submit(model.close)
            executor.shutdown(wait=False)
