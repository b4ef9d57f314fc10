"""The engine's front: per loaded model, one worker thread running a continuous-batching loop.

Each step the worker evaluates every running sequence's next token (or a chunk of its prompt)
in small passes, samples each sequence and hands text to asyncio. Sequences
join at the next step and leave as soon as they end or are cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from traitlets import Bool, Int
from traitlets.config import LoggingConfigurable

from ..backend import Messages, OutputSchema, Tools
from ..catalog import ModelEntry
from ..fim import raw_prompt_tokens
from ..generation import (
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
from ..guidance import SchemaMatcher
from ..memory import footprint
from ..templates import THINK_OPEN, ChatTemplate, ChatTemplateError, transcript
from .llama.runtime import prepare_llama_cpp
from .llama.tokenizer import LlamaTokenizer
from .worker import ModelWorker
from .worker_inputs import EngineSettings, GenerationRequest

log = logging.getLogger(__name__)

#: The settings' defaults, which the traits of :class:`LocalEngine` offer.
_DEFAULTS = EngineSettings()


class _Tokenizing:
    """A model's chat template, tokenizer and schema compiler, used from one thread."""

    def __init__(self, entry: ModelEntry) -> None:
        self.entry = entry
        self.executor = ThreadPoolExecutor(1, thread_name_prefix=f"lmsp-tok-{entry.id}")
        self._template: tuple[ChatTemplate | None, LlamaTokenizer] | None = None

    def render(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], schema: Any
    ) -> Prompt:
        """Render, tokenize and compile the schema; runs on the tokenizer thread."""
        template, tokenizer = self._tokenizer()
        if schema is not None:
            tokenizer.schemas.matcher(schema)
        prompt = self._prompt(template, messages, tools)
        answered = next((i for i, m in enumerate(messages) if m.role == "assistant"), None)
        if answered is None:
            return prompt
        # The first turn's prompt, as it was rendered to be answered, as far as it still holds.
        first = self._prompt(template, messages[:answered], tools).tokens if answered else []
        return replace(prompt, stable_until=_shared(first, prompt.tokens))

    def _prompt(
        self,
        template: ChatTemplate | None,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
    ) -> Prompt:
        """``messages`` through the chat template; a base model's as the raw prompt of their
        transcript, as a raw completion of that text reads it."""
        if template is None:
            if self.entry.kind == "chat":
                raise ChatTemplateError(
                    f"model {self.entry.id!r} has its chat template only in Ollama's own format, "
                    "which this service does not render: give it one in LmspApp.chat_templates"
                )
            return self.render_text(transcript(messages, tools), None)
        text = template.render(messages, tools)
        return Prompt(text=text, tokens=self._tokenizer()[1].tokenize(text))

    def render_text(self, text: str, suffix: str | None) -> Prompt:
        """A raw prompt, filling in the middle where the model can; on the tokenizer thread."""
        tokenizer = self._tokenizer()[1]
        fim = self.entry.fim
        tokens = raw_prompt_tokens(tokenizer.tokenize, text, suffix, bos=tokenizer.bos, fim=fim)
        # Filling in the middle, the text after the gap follows the text before it.
        gap = tokens.index(fim.suffix) if suffix is not None and fim is not None else None
        return Prompt(text=text, tokens=tokens, raw=True, suffix=suffix, stable_until=gap)

    def matcher(self, schema: Any) -> SchemaMatcher:
        """A sequence's matcher of ``schema``; runs on the tokenizer thread."""
        return self._tokenizer()[1].schemas.matcher(schema)

    def tokenize(self, text: str) -> tuple[int, ...]:
        """The tokens of ``text``, as the model would write it; runs on the tokenizer thread."""
        return tuple(self._tokenizer()[1].tokenize(text))

    def _tokenizer(self) -> tuple[ChatTemplate | None, LlamaTokenizer]:
        if self._template is None:
            tokenizer = LlamaTokenizer(self.entry.path())
            source = self.entry.chat_template
            template = None
            if source is not None:
                template = ChatTemplate(
                    source, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token
                )
            self._template = (template, tokenizer)
        return self._template

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


def _shared(first: list[int], tokens: list[int]) -> int:
    """How many tokens ``first`` and ``tokens`` start with alike."""
    pairs = zip(first, tokens, strict=False)
    return next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(first), len(tokens)))


def context_length(entry: ModelEntry, settings: EngineSettings) -> int:
    """The context window the engine gives ``entry``: its trained one, capped by the settings."""
    if settings.context_size <= 0:
        return entry.context_length
    return min(entry.context_length, settings.context_size)


class LocalEngine(LoggingConfigurable):
    """Runs models: renders prompts, tokenizes, and generates on per-model worker threads.

    The default ``LmspApp.engine_class``: the app builds it as ``LocalEngine(parent=app)``, and
    it reads its settings (its traits) from the Jupyter config.
    """

    context_size = Int(
        _DEFAULTS.context_size,
        help="Context window in tokens given to each loaded model, capped by what the model "
        "was trained for. 0: the model's full trained context.",
    ).tag(config=True)

    threads = Int(
        _DEFAULTS.threads,
        help="CPU threads llama.cpp uses per model, for prompts and generation alike (and "
        "for embeddings). Default: every core (llama-cpp-python's own default, half of them, "
        "is slower).",
    ).tag(config=True)

    batch_size = Int(
        _DEFAULTS.batch_size,
        help="Most tokens one step of a model evaluates: the running requests' next tokens "
        "and chunks of new prompts (while requests stream, prompts take at most 32 a step).",
    ).tag(config=True)

    parallel_requests = Int(
        _DEFAULTS.parallel,
        help="Requests one model generates at once, direct requests and tasks alike, in one "
        "batch per step; more wait in line. Each has a KV cache of context_size tokens (and "
        "one more for padding), which a finished request leaves for the next with its prefix.",
    ).tag(config=True)

    speculation = Bool(
        _DEFAULTS.speculation,
        help="Whether local models verify guessed tokens in one pass: what followed the "
        "latest earlier occurrence of the answer's last tokens in its prompt and answer, or "
        "the text a request predicts (Chat Completions' prediction). The text is the same, "
        "greedy or seeded; a request guesses only while its guesses pay for the pass, and may "
        'turn it off with extensions["x-lmsp-jupyter"]["speculation"] = false.',
    ).tag(config=True)

    def __init__(self, settings: EngineSettings | None = None, **kwargs: Any) -> None:
        """Run models with ``settings``, by default those of its traits; ``kwargs`` are
        ``parent``, ``config``, ``log`` and traits."""
        super().__init__(**kwargs)
        self.settings = settings or EngineSettings(
            context_size=self.context_size,
            threads=self.threads,
            batch_size=self.batch_size,
            parallel=self.parallel_requests,
            speculation=self.speculation,
        )
        self._inexact = prepare_llama_cpp()
        self._workers: dict[str, ModelWorker] = {}
        self._tokenizers: dict[str, _Tokenizing] = {}
        self._lock = threading.Lock()

    def _worker(self, entry: ModelEntry) -> ModelWorker:
        with self._lock:
            worker = self._workers.get(entry.id)
            if worker is None:
                settings = replace(self.settings, context_size=context_length(entry, self.settings))
                worker = self._workers[entry.id] = ModelWorker(entry, settings)
            return worker

    def _tokenizing(self, entry: ModelEntry) -> _Tokenizing:
        with self._lock:
            tokenizing = self._tokenizers.get(entry.id)
            if tokenizing is None:
                tokenizing = self._tokenizers[entry.id] = _Tokenizing(entry)
            return tokenizing

    def context_length(self, entry: ModelEntry) -> int:
        """The context window, in tokens, that requests for ``entry`` must fit in."""
        return context_length(entry, self.settings)

    def parallel(self, entry: ModelEntry) -> int:
        """How many sequences of ``entry`` generate at once."""
        return self.settings.parallel

    def inexact(self, entry: ModelEntry) -> str | None:
        """Why ``entry``'s text at temperature 0 may depend on what else runs or was cached:
        llama.cpp's settings in this process (``prepare_llama_cpp``); ``None``: it does not."""
        return self._inexact

    def is_loaded(self, model_id: str) -> bool:
        """Whether the model's weights are in memory."""
        worker = self._workers.get(model_id)
        return worker is not None and worker.loaded

    def footprint(self, entry: ModelEntry) -> int:
        """Bytes ``entry`` takes once loaded: its weights and a KV cache of ``context_size``
        tokens for each of its ``parallel`` sequences."""
        return footprint(
            entry.weights_bytes,
            entry.kv_bytes_per_token,
            self.context_length(entry),
            self.settings.parallel,
        )

    async def load(self, entry: ModelEntry) -> None:
        """Load ``entry``'s weights on its worker thread (nothing happens if they are loaded)."""
        worker = self._worker(entry)
        await asyncio.get_running_loop().run_in_executor(None, worker.load)

    async def unload(self, model_id: str) -> None:
        """Stop the model's worker and free its weights and cache; called while it is idle."""
        with self._lock:
            worker = self._workers.pop(model_id, None)
        if worker is None:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(None, worker.close)
        except RuntimeError:
            # Executors take no new work once the interpreter exits (an in-process server is
            # stopped at exit); nothing else holds the model by then.
            worker.close()

    def thinks(self, entry: ModelEntry) -> bool:
        """Whether ``entry``'s template has reasoning between ``<think>`` tags."""
        return THINK_OPEN in (entry.chat_template or "")

    async def render(
        self, entry: ModelEntry, messages: Messages, tools: Tools = (), schema: OutputSchema = None
    ) -> Prompt:
        """The model's prompt for ``messages`` (and ``tools``) through its chat template (a
        base model's: their plain transcript, ``templates.transcript``), tokenized; a
        ``schema`` llguidance cannot compile for the model raises ``GrammarError``."""
        tokenizing = self._tokenizing(entry)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            tokenizing.executor, tokenizing.render, messages, tools, schema
        )

    async def render_text(self, entry: ModelEntry, text: str, suffix: str | None = None) -> Prompt:
        """The tokens that continue ``text`` (or fill in the middle before ``suffix``)."""
        tokenizing = self._tokenizing(entry)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(tokenizing.executor, tokenizing.render_text, text, suffix)

    async def generate(
        self, entry: ModelEntry, prompt: Prompt, params: SamplingParams, cancel: CancelToken
    ) -> AsyncIterator[GenerationEvent]:
        """Generate with the model's other sequences; beyond ``parallel`` they wait their turn.

        The last event is a ``GenerationDone``. A consumer that stops iterating early cancels
        the generation, which then ends at the worker's next step.
        """
        loop = asyncio.get_running_loop()
        matcher: SchemaMatcher | None = None
        if params.schema is not None:
            tokenizing = self._tokenizing(entry)
            try:
                matcher = await loop.run_in_executor(
                    tokenizing.executor, tokenizing.matcher, params.schema
                )
            except GrammarError as exc:
                raise EngineError(str(exc)) from None
        prediction: tuple[int, ...] = ()
        if params.prediction and params.speculation and self.settings.speculation:
            tokenizing = self._tokenizing(entry)
            prediction = await loop.run_in_executor(
                tokenizing.executor, tokenizing.tokenize, params.prediction
            )
        queue: asyncio.Queue[GenerationEvent | BaseException] = asyncio.Queue()

        def emit(event: GenerationEvent | BaseException) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(queue.put_nowait, event)

        self._worker(entry).submit(
            GenerationRequest(prompt, params, cancel, emit, matcher, prediction)
        )
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
        """Stop every worker and free its model; running generations are cancelled."""
        with self._lock:
            for worker in self._workers.values():
                worker.close()
            for tokenizing in self._tokenizers.values():
                tokenizing.close()
            self._workers.clear()
            self._tokenizers.clear()
