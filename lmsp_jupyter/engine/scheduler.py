"""The engine's front: one worker thread per loaded model, async generation for the service."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .catalog import ModelEntry
from .generation import (
    CancelToken,
    ChatMessage,
    EngineError,
    GenerationDone,
    GenerationEvent,
    GrammarError,
    Prompt,
    SamplingParams,
    ToolSpec,
)
from .guidance import SchemaMatcher
from .llama import LlamaRunner, LlamaTokenizer
from .memory import footprint
from .templates import THINK_OPEN, ChatTemplate, fallback_template

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineSettings:
    """How models are loaded."""

    context_size: int = 8192
    threads: int = os.cpu_count() or 1
    batch_size: int = 512


class _ModelWorker:
    """Everything of one model. The runner is touched only from ``generator``'s one thread,
    the tokenizer only from ``tokenizer``'s, so no llama.cpp object sees two threads."""

    def __init__(self, entry: ModelEntry, settings: EngineSettings) -> None:
        self.entry = entry
        self.settings = settings
        self.generator = ThreadPoolExecutor(1, thread_name_prefix=f"lmsp-gen-{entry.id}")
        self.tokenizer = ThreadPoolExecutor(1, thread_name_prefix=f"lmsp-tok-{entry.id}")
        self._runner: LlamaRunner | None = None
        self._template: tuple[ChatTemplate, LlamaTokenizer] | None = None

    @property
    def loaded(self) -> bool:
        return self._runner is not None

    def render(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], schema: Any
    ) -> Prompt:
        """Render, tokenize and compile the schema; runs on the tokenizer thread."""
        template, tokenizer = self._tokenizer()
        if schema is not None:
            tokenizer.schemas.matcher(schema)
        text = template.render(messages, tools)
        return Prompt(text=text, tokens=tokenizer.tokenize(text))

    def matcher(self, schema: Any) -> SchemaMatcher:
        """A sequence's matcher of ``schema``; runs on the tokenizer thread."""
        return self._tokenizer()[1].schemas.matcher(schema)

    def _tokenizer(self) -> tuple[ChatTemplate, LlamaTokenizer]:
        if self._template is None:
            tokenizer = LlamaTokenizer(self.entry.path())
            template = ChatTemplate(
                template_source(self.entry),
                bos_token=tokenizer.bos_token,
                eos_token=tokenizer.eos_token,
            )
            self._template = (template, tokenizer)
        return self._template

    def runner(self) -> LlamaRunner:
        """The loaded model, loading it on first use; runs on the generator thread."""
        if self._runner is None:
            log.info("loading model %s", self.entry.id)
            self._runner = LlamaRunner(
                self.entry.path(),
                context_size=context_length(self.entry, self.settings),
                threads=self.settings.threads,
                batch_size=self.settings.batch_size,
            )
        return self._runner

    def unload(self) -> None:
        """Free the weights and the context; runs on the generator thread."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def shutdown(self) -> None:
        self.generator.shutdown(wait=False, cancel_futures=True)
        self.tokenizer.shutdown(wait=False, cancel_futures=True)


def template_source(entry: ModelEntry) -> str:
    """The chat template of ``entry``: its GGUF's own, or the fallback for its architecture."""
    return entry.chat_template or fallback_template(entry.architecture)


def context_length(entry: ModelEntry, settings: EngineSettings) -> int:
    """The context window the engine gives ``entry``: its trained one, capped by the settings."""
    if settings.context_size <= 0:
        return entry.context_length
    return min(entry.context_length, settings.context_size)


class Engine:
    """Runs models: renders prompts, tokenizes, and generates on per-model worker threads."""

    def __init__(self, settings: EngineSettings | None = None) -> None:
        self.settings = settings or EngineSettings()
        self._workers: dict[str, _ModelWorker] = {}
        self._lock = threading.Lock()

    def _worker(self, entry: ModelEntry) -> _ModelWorker:
        with self._lock:
            worker = self._workers.get(entry.id)
            if worker is None:
                worker = self._workers[entry.id] = _ModelWorker(entry, self.settings)
            return worker

    def context_length(self, entry: ModelEntry) -> int:
        """The context window, in tokens, that requests for ``entry`` must fit in."""
        return context_length(entry, self.settings)

    def is_loaded(self, model_id: str) -> bool:
        """Whether the model's weights are in memory."""
        worker = self._workers.get(model_id)
        return worker is not None and worker.loaded

    def footprint(self, entry: ModelEntry) -> int:
        """Bytes ``entry`` takes once loaded: its weights and its one sequence's KV cache."""
        return footprint(
            entry.weights_bytes, entry.kv_bytes_per_token, self.context_length(entry), 1
        )

    async def load(self, entry: ModelEntry) -> None:
        """Load ``entry``'s weights on its worker thread (nothing happens if they are loaded)."""
        worker = self._worker(entry)
        await asyncio.get_running_loop().run_in_executor(worker.generator, worker.runner)

    async def unload(self, model_id: str) -> None:
        """Free the model's weights and context on its worker thread, after its queued jobs."""
        worker = self._workers.get(model_id)
        if worker is None:
            return
        try:
            unloaded = asyncio.get_running_loop().run_in_executor(worker.generator, worker.unload)
        except RuntimeError:
            # Executors take no new work once the interpreter exits (an in-process server is
            # stopped at exit); their threads are joined by then, so nothing else holds the model.
            worker.unload()
            return
        await unloaded

    def thinks(self, entry: ModelEntry) -> bool:
        """Whether ``entry``'s template has reasoning between ``<think>`` tags."""
        return THINK_OPEN in template_source(entry)

    async def render(
        self,
        entry: ModelEntry,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        schema: dict[str, Any] | None = None,
    ) -> Prompt:
        """The model's prompt for ``messages`` (and ``tools``) through its chat template,
        tokenized; a ``schema`` llguidance cannot compile for the model raises ``GrammarError``."""
        worker = self._worker(entry)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(worker.tokenizer, worker.render, messages, tools, schema)

    async def generate(
        self, entry: ModelEntry, prompt: Prompt, params: SamplingParams, cancel: CancelToken
    ) -> AsyncIterator[GenerationEvent]:
        """Generate on the model's worker; jobs for one model run one at a time in arrival order.

        The last event is a ``GenerationDone``. A consumer that stops iterating early cancels
        the generation, which then ends after at most one more token.
        """
        worker = self._worker(entry)
        loop = asyncio.get_running_loop()
        matcher: SchemaMatcher | None = None
        if params.schema is not None:
            try:
                matcher = await loop.run_in_executor(
                    worker.tokenizer, worker.matcher, params.schema
                )
            except GrammarError as exc:
                raise EngineError(str(exc)) from None
        queue: asyncio.Queue[GenerationEvent | BaseException] = asyncio.Queue()

        def emit(event: GenerationEvent | BaseException) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(queue.put_nowait, event)

        def job() -> None:
            try:
                worker.runner().generate(prompt, params, cancel, emit, matcher)
            except Exception as exc:  # every failure reaches the consumer, none kills the worker
                log.exception("generation with %s failed", entry.id)
                emit(exc)

        worker.generator.submit(job)
        finished = False
        try:
            while not finished:
                event = await queue.get()
                if isinstance(event, BaseException):
                    finished = True
                    if isinstance(event, EngineError):
                        raise event
                    raise EngineError(f"model {entry.id!r} failed while generating") from event
                finished = isinstance(event, GenerationDone)
                yield event
        finally:
            if not finished:
                cancel.cancel()

    def close(self) -> None:
        """Stop every worker; running generations are cancelled at their next token."""
        with self._lock:
            for worker in self._workers.values():
                worker.shutdown()
            self._workers.clear()
