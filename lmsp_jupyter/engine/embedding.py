"""Embeddings: each embedding model loaded by the model manager, and run on its own thread.

A model embeds with its GGUF's own pooling (BERT-family and Nomic GGUFs, EmbeddingGemma), or,
for a generative model an operator names (``LmspApp.embedding_models``), with the pooling named
there. Requests to one model are gathered: those that arrive while a pass runs (and all the
texts of each) are embedded together next, as many texts per llama.cpp pass as fit, each its own
sequence, so that separate requests share passes as llama-server's slots do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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


def embedding_window(entry: ModelEntry, window: int = EMBEDDING_WINDOW) -> int:
    """The tokens one text may have when ``entry`` embeds: ``window``, or fewer when the model
    was trained for fewer (a BERT of 512 positions)."""
    return min(window, entry.context_length)


class InputTooLong(EngineError):
    """A text has more tokens than an embedding takes."""

    def __init__(self, index: int, tokens: int, window: int) -> None:
        super().__init__(f"input {index} has {tokens} tokens; an embedding takes {window} at most")
        self.index = index


class Embedder(Protocol):
    """A model loaded to embed (``engine.local.llama.embedder.LlamaEmbedder``)."""

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
#: The vectors of a request's texts and the tokens they took.
Vectors = tuple[list[list[float]], int]


@dataclass(frozen=True)
class _Request:
    """One request's texts waiting to be embedded with those of others."""

    texts: list[str]
    truncate: bool
    answer: asyncio.Future[Vectors]


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
        self._windows: dict[str, int] = {}
        self._waiting: dict[str, list[_Request]] = {}
        self._gathering: dict[str, asyncio.Future[None]] = {}

    def footprint(self, entry: ModelEntry) -> int:
        """Bytes ``entry`` takes loaded to embed: its weights and one window's KV cache."""
        window = embedding_window(entry, self.window)
        return footprint(entry.weights_bytes, entry.kv_bytes_per_token, window, 1)

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
            window = embedding_window(entry, self.window)
            self._models[entry.id] = self.factory(entry.path(), pooling, window, self.threads)
            self._windows[entry.id] = window

    async def unload(self, model_id: str) -> None:
        """Free the model once its thread is idle (called while nothing embeds with it)."""
        executor = self._executors.pop(model_id, None)
        model = self._models.pop(model_id, None)
        self._windows.pop(model_id, None)
        if executor is None:
            return
        if model is not None:
            await asyncio.get_running_loop().run_in_executor(executor, model.close)
        executor.shutdown(wait=False)

    async def embed(
        self, entry: ModelEntry, texts: Sequence[str], truncate: bool = False
    ) -> Vectors:
        """The normalized vectors of ``texts`` and their tokens, by ``entry`` loaded to embed
        (:meth:`load`); a text over the window is cut to it with ``truncate``, else raises
        :class:`InputTooLong`. The texts are embedded together with those of the requests
        waiting beside them, so a vector may differ in its last bits with the texts it shares
        a batch with (as llama-server's and Ollama's do)."""
        executor = self._executors.get(entry.id)
        model = self._models.get(entry.id)
        if executor is None or model is None:
            raise EngineError(f"model {entry.id!r} is not loaded to embed")
        loop = asyncio.get_running_loop()
        request = _Request(list(texts), truncate, loop.create_future())
        self._waiting.setdefault(entry.id, []).append(request)
        if entry.id not in self._gathering:
            self._gathering[entry.id] = asyncio.ensure_future(
                self._gather(entry.id, executor, model)
            )
        return await request.answer

    async def _gather(self, model_id: str, executor: ThreadPoolExecutor, model: Embedder) -> None:
        """Embed the waiting requests, all those waiting at once, until none waits (on the
        model's thread; the event loop only hands the requests over)."""
        loop = asyncio.get_running_loop()
        try:
            while self._waiting.get(model_id):
                requests = [r for r in self._waiting.pop(model_id) if not r.answer.done()]
                if not requests:
                    continue
                try:
                    answers = await loop.run_in_executor(
                        executor, self._embed, model, self._windows[model_id], requests
                    )
                except Exception as exc:  # the engine failed: every request of the pass
                    answers = [exc] * len(requests)
                for request, answer in zip(requests, answers, strict=True):
                    if request.answer.done():  # its client left
                        continue
                    if isinstance(answer, Exception):
                        request.answer.set_exception(answer)
                    else:
                        request.answer.set_result(answer)
        finally:
            del self._gathering[model_id]

    def _embed(
        self, model: Embedder, window: int, requests: list[_Request]
    ) -> list[Vectors | Exception]:
        """The answers of ``requests``: their vectors, all texts embedded in shared passes,
        or :class:`InputTooLong` for a request with a text over the window and no
        ``truncate``."""
        answers: list[Vectors | Exception] = []
        texts: list[str] = []
        for request in requests:
            counts = [model.count(text) for text in request.texts]
            over = [i for i, count in enumerate(counts) if count > window]
            if over and not request.truncate:
                answers.append(InputTooLong(over[0], counts[over[0]], window))
                continue
            answers.append(([], sum(min(count, window) for count in counts)))
            texts.extend(request.texts)
        vectors = iter(model.embed(texts, True)[0] if texts else [])
        for index, (request, answer) in enumerate(zip(requests, answers, strict=True)):
            if not isinstance(answer, Exception):
                answers[index] = ([next(vectors) for _ in request.texts], answer[1])
        return answers

    def close(self) -> None:
        """Free every model once its thread is idle."""
        executors, self._executors = self._executors, {}
        self._windows.clear()
        for model_id, executor in executors.items():
            model = self._models.pop(model_id, None)
            if model is not None:
                executor.submit(model.close)
            executor.shutdown(wait=False)
