"""Continuous batching of one model: a worker thread, its sequences, their KV cache slots.

Each step the worker evaluates every running sequence's next token, or a chunk of its prompt,
in passes of 2 to 7 tokens (the sequences' next tokens side by side), samples each sequence as
soon as its pass is read and hands its text to the consumer. Each slot is a sequence of the
llama.cpp context with its own KV cache, its cells in position order.
A request joins at the next step; one that is cancelled while it waits never reaches the
model. A finished sequence leaves its tokens in its slot's cache, and the next request whose
prompt starts with them evaluates only what is new.
"""

from __future__ import annotations

import codecs
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from .catalog import ModelEntry
from .generation import (
    CancelToken,
    EngineError,
    GenerationDone,
    GenerationEvent,
    Prompt,
    SamplingParams,
    StopReason,
    TextDelta,
)
from .guidance import SchemaMatcher
from .llama import PASS_TOKENS, BatchToken, LlamaModel, TokenSampler

log = logging.getLogger(__name__)

#: Prompt tokens one step evaluates while other sequences decode: bounded so that running
#: streams keep their pace while a new prompt is read.
PROMPT_TOKENS_WHILE_DECODING = 32
#: Prompt tokens one step evaluates when no sequence decodes; bounds how long a new request
#: or a cancellation waits for the step in progress.
PROMPT_TOKENS_ALONE = 128


@dataclass(frozen=True)
class WorkerSettings:
    """How one model is loaded and run."""

    #: The window each request must fit in; the KV cache holds as many tokens, shared.
    context_size: int
    parallel: int
    threads: int
    batch_size: int


@dataclass(frozen=True)
class GenerationRequest:
    """What a consumer asks the worker for, and where its events go (from the worker thread)."""

    prompt: Prompt
    params: SamplingParams
    cancel: CancelToken
    emit: Callable[[GenerationEvent | BaseException], None]
    #: Where the sequence stands in ``params.schema``, when it has one.
    matcher: SchemaMatcher | None = None


class _Load:
    """A request to load the model now; ``done`` resolves once it is loaded (or failed)."""

    def __init__(self) -> None:
        self.done: Future[None] = Future()


class _Text:
    """A sequence's bytes turned into text, holding back what might begin a stop string."""

    def __init__(self, stop: tuple[str, ...]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(s for s in stop if s)
        self._held = ""

    def feed(self, data: bytes) -> tuple[str, bool]:
        """The text that may go out after ``data``, and whether a stop string ended it."""
        text = self._held + self._decoder.decode(data)
        found = [index for index in (text.find(stop) for stop in self._stop) if index >= 0]
        if found:
            self._held = ""
            return text[: min(found)], True
        keep = self._stop_prefix(text)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep], False

    def _stop_prefix(self, text: str) -> int:
        """The length of the longest end of ``text`` that a stop string starts with."""
        for length in range(min(len(text), max((len(s) for s in self._stop), default=0)), 0, -1):
            if any(stop.startswith(text[-length:]) for stop in self._stop):
                return length
        return 0

    def flush(self) -> str:
        """What is left once generation ends without a stop string."""
        text = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return text


@dataclass(eq=False)
class _Slot:
    """A sequence id of the context and the tokens its cache holds, position by position."""

    id: int
    tokens: list[int] = field(default_factory=list)
    sequence: _Sequence | None = None
    used_at: int = 0


@dataclass(eq=False)
class _Sequence:
    """A request being generated: its prompt and output tokens, its sampler and its slot."""

    request: GenerationRequest
    sampler: TokenSampler
    limit: int
    tokens: list[int]
    text: _Text
    slot: _Slot | None = None
    cached_tokens: int = 0
    generated: int = 0

    @property
    def pending(self) -> int:
        """Tokens not yet in the cache: the prompt's rest, or the last sampled token."""
        assert self.slot is not None
        return len(self.tokens) - len(self.slot.tokens)


class ModelWorker:
    """One model's thread, context and sequences. ``submit`` and ``close`` are thread-safe."""

    def __init__(self, entry: ModelEntry, settings: WorkerSettings) -> None:
        self.entry = entry
        self.settings = settings
        self._inbox: queue.SimpleQueue[GenerationRequest | _Load | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._model: LlamaModel | None = None
        self._waiting: deque[GenerationRequest] = deque()
        self._running: list[_Sequence] = []
        self._slots = [_Slot(id) for id in range(settings.parallel)]
        #: A sequence of the context that only ever holds padding tokens, for a lone token
        #: of the last slot.
        self._pad_sequence = settings.parallel
        self._clock = 0

    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory."""
        return self._model is not None

    def submit(self, request: GenerationRequest) -> None:
        """Queue ``request``; it starts at the next step with a free sequence."""
        self._send(request)

    def load(self) -> None:
        """Load the model on the worker's thread now, waiting until it is loaded."""
        item = _Load()
        self._send(item)
        item.done.result()

    def _send(self, item: GenerationRequest | _Load) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"lmsp-gen-{self.entry.id}", daemon=True
                )
                self._thread.start()
        self._inbox.put(item)

    def close(self, timeout: float = 10.0) -> None:
        """Cancel every sequence, free the model and stop the thread."""
        with self._start_lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._inbox.put(None)
            thread.join(timeout)

    # --- the worker thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._take(block=not (self._running or self._waiting)):
                self._admit()
                if self._running:
                    try:
                        self._step()
                    except Exception as exc:  # every failure reaches its consumers
                        log.exception("generation with %s failed", self.entry.id)
                        self._fail_running(exc)
        finally:
            for sequence in list(self._running):
                self._finish(sequence, "cancelled")
            for request in self._waiting:
                request.emit(GenerationDone("cancelled", len(request.prompt.tokens), 0))
            self._waiting.clear()
            self._refuse_unread()
            if self._model is not None:
                self._model.close()
                self._model = None

    def _refuse_unread(self) -> None:
        """What was sent after the worker began to close: loads fail, requests are cancelled."""
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Load):
                item.done.set_exception(EngineError(f"model {self.entry.id!r} was unloaded"))
            elif item is not None:
                item.emit(GenerationDone("cancelled", len(item.prompt.tokens), 0))

    def _take(self, block: bool) -> bool:
        """Move submitted requests to the waiting line; ``False`` once closing."""
        try:
            item = self._inbox.get(block=block)
            while True:
                if item is None:
                    return False
                if isinstance(item, _Load):
                    try:
                        self._load()
                    except EngineError as exc:
                        item.done.set_exception(exc)
                    else:
                        item.done.set_result(None)
                else:
                    self._waiting.append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            return True

    def _load(self) -> LlamaModel:
        if self._model is None:
            log.info("loading model %s", self.entry.id)
            self._model = LlamaModel(
                self.entry.path(),
                cells=self.settings.context_size,
                sequences=len(self._slots) + 1,
                threads=self.settings.threads,
            )
        return self._model

    def _admit(self) -> None:
        """Start waiting requests in arrival order while sequences are free."""
        for request in list(self._waiting):
            if request.cancel.cancelled:
                self._waiting.remove(request)
                request.emit(GenerationDone("cancelled", len(request.prompt.tokens), 0))
        while self._waiting and len(self._running) < self.settings.parallel:
            try:
                model = self._load()
            except EngineError as exc:
                for request in self._waiting:
                    request.emit(exc)
                self._waiting.clear()
                return
            sequence = self._sequence(self._waiting.popleft(), model)
            if sequence is not None:
                self._place(sequence)
                self._running.append(sequence)

    def _sequence(self, request: GenerationRequest, model: LlamaModel) -> _Sequence | None:
        prompt = request.prompt.tokens
        limit = min(request.params.max_tokens, self.settings.context_size - len(prompt))
        if limit <= 0 or not prompt:
            request.emit(GenerationDone("context_length", len(prompt), 0))
            return None
        sampler = model.sampler(request.params, request.matcher)
        return _Sequence(request, sampler, limit, list(prompt), _Text(request.params.stop))

    def _place(self, sequence: _Sequence) -> None:
        """Give ``sequence`` the free slot whose cache shares the longest prefix with it."""
        assert self._model is not None
        free = [slot for slot in self._slots if slot.sequence is None]
        reuse = {slot.id: self._reusable(slot, sequence.tokens) for slot in free}
        slot = max(free, key=lambda s: (reuse[s.id], not s.tokens, -s.used_at))
        kept = reuse[slot.id]
        self._model.forget(slot.id, kept)
        del slot.tokens[kept:]
        slot.sequence, sequence.slot = sequence, slot
        if sequence.generated == 0:
            sequence.cached_tokens = kept

    def _reusable(self, slot: _Slot, tokens: list[int]) -> int:
        """How many of ``tokens`` ``slot``'s cache can serve (one is always left to evaluate).

        With sliding-window attention llama.cpp may take the cells of positions that fell out
        of the window for new tokens, so a trimmed cache may miss some its new tokens need: a
        cache longer than the window serves only when all of it is a prefix of ``tokens``
        (a conservative rule; the full-size window cache would usually allow more).
        """
        assert self._model is not None
        limit = min(len(slot.tokens), len(tokens) - 1)
        same = 0
        while same < limit and slot.tokens[same] == tokens[same]:
            same += 1
        window = self._model.sliding_window
        if same < len(slot.tokens) and window and len(slot.tokens) >= window:
            return 0
        return same

    def _plan(self) -> list[tuple[_Sequence, int]]:
        """How many pending tokens of each running sequence this step evaluates."""
        decoding = any(s.pending == 1 for s in self._running)
        budget = PROMPT_TOKENS_WHILE_DECODING if decoding else PROMPT_TOKENS_ALONE
        budget = max(PASS_TOKENS, min(budget, self.settings.batch_size - len(self._running)))
        plan: list[tuple[_Sequence, int]] = []
        for sequence in self._running:
            pending = sequence.pending
            take = 1 if pending == 1 else min(pending, budget)
            if pending > 1:
                budget -= take
            if take > 0:
                plan.append((sequence, take))
        return plan

    def _step(self) -> None:
        """One step: every running sequence's next token or prompt chunk, in passes of 2 to
        ``PASS_TOKENS`` tokens (see ``engine/llama.py``), each sampled as soon as it is read."""
        for sequence in list(self._running):
            if sequence.request.cancel.cancelled:
                self._finish(sequence, "cancelled")
        plan = self._plan() if self._running else []
        for sequence, take in plan:
            if take > 1:
                for size in _pass_sizes(take):
                    self._pass([sequence], size)
        singles = sorted((s for s, take in plan if take == 1), key=lambda s: _slot_id(s))
        for group in _consecutive_groups(singles):
            self._pass(group, 1)

    def _pass(self, group: list[_Sequence], size: int) -> None:
        """Evaluate the next ``size`` pending tokens of each sequence of ``group`` (their slots
        consecutive) in one pass, then sample those whose pending tokens are all read."""
        assert self._model is not None
        batch: list[BatchToken] = []
        rows: list[tuple[_Sequence, int]] = []
        for sequence in group:
            slot = sequence.slot
            assert slot is not None
            start = len(slot.tokens)
            last = start + size == len(sequence.tokens)
            for position in range(start, start + size):
                ends = last and position == start + size - 1
                batch.append(BatchToken(sequence.tokens[position], position, slot.id, ends))
            if last:
                rows.append((sequence, len(batch) - 1))
        pad = self._pad(group[0]) if len(batch) == 1 else None
        if pad is not None:
            batch.append(pad)
        try:
            self._model.decode(batch)
        finally:
            if pad is not None:
                self._model.forget(pad.sequence, pad.position)
        for sequence in group:
            assert sequence.slot is not None
            start = len(sequence.slot.tokens)
            sequence.slot.tokens.extend(sequence.tokens[start : start + size])
        for sequence, row in rows:
            self._advance(sequence, sequence.sampler.next(row))

    def _pad(self, sequence: _Sequence) -> BatchToken:
        """A padding token beside ``sequence``'s lone token, in the next sequence of the
        context (consecutive, as llama.cpp's split of a batch across streams needs); the
        cache it enters is dropped right after the pass."""
        assert sequence.slot is not None and self._model is not None
        neighbour = sequence.slot.id + 1
        if neighbour == self._pad_sequence:
            return BatchToken(0, 0, neighbour, False)
        slot = self._slots[neighbour]
        if len(slot.tokens) >= self._model.cells:  # an idle cache as long as the context
            assert slot.sequence is None
            self._model.forget(slot.id)
            slot.tokens.clear()
        return BatchToken(0, len(slot.tokens), neighbour, False)

    def _advance(self, sequence: _Sequence, tokens: list[int]) -> None:
        """Take ``sequence``'s next ``tokens`` (sampled, or forced by its schema): text out,
        or the end."""
        assert self._model is not None
        for token in tokens:
            if self._model.ends(token):
                self._finish(sequence, "stop")
                return
            sequence.sampler.accept(token)
            sequence.tokens.append(token)
            sequence.generated += 1
            text, stopped = sequence.text.feed(self._model.piece(token))
            if text:
                sequence.request.emit(TextDelta(text))
            if stopped:
                self._finish(sequence, "stop", flush=False)
                return
            if sequence.generated >= sequence.limit:
                params = sequence.request.params
                reason: StopReason = (
                    "max_tokens" if sequence.generated >= params.max_tokens else "context_length"
                )
                self._finish(sequence, reason)
                return
        if sequence.sampler.finished:
            self._finish(sequence, "stop")

    def _finish(self, sequence: _Sequence, reason: StopReason, flush: bool = True) -> None:
        request = sequence.request
        tail = sequence.text.flush() if flush else ""
        if tail:
            request.emit(TextDelta(tail))
        request.emit(
            GenerationDone(
                reason=reason,
                prompt_tokens=len(request.prompt.tokens),
                output_tokens=sequence.generated,
                cached_tokens=sequence.cached_tokens,
            )
        )
        sequence.sampler.close()
        self._running.remove(sequence)
        if sequence.slot is not None:
            self._clock += 1
            sequence.slot.sequence, sequence.slot.used_at = None, self._clock

    def _fail_running(self, exc: BaseException) -> None:
        """A failed batch fails every sequence in it; the caches are dropped, the worker goes on."""
        for sequence in list(self._running):
            sequence.request.emit(exc)
            sequence.sampler.close()
            self._running.remove(sequence)
        for slot in self._slots:
            slot.sequence = None
            slot.tokens.clear()
            if self._model is not None:
                self._model.forget(slot.id)


def _slot_id(sequence: _Sequence) -> int:
    assert sequence.slot is not None
    return sequence.slot.id


def _pass_sizes(count: int) -> list[int]:
    """``count`` tokens (2 or more) of one sequence in as few passes as can hold them, of
    sizes as even as can be (none of one token)."""
    passes = -(-count // PASS_TOKENS)
    size, extra = divmod(count, passes)
    return [size + 1] * extra + [size] * (passes - extra)


def _consecutive_groups(sequences: list[_Sequence]) -> list[list[_Sequence]]:
    """Sequences (sorted by slot) in groups of consecutive slots, at most ``PASS_TOKENS`` in a
    group and the groups of a run as even as can be (llama.cpp reads a pass across streams only
    for consecutive sequences; a group of one gets a padding token)."""
    runs: list[list[_Sequence]] = []
    for sequence in sequences:
        if runs and _slot_id(runs[-1][-1]) + 1 == _slot_id(sequence):
            runs[-1].append(sequence)
        else:
            runs.append([sequence])
    groups: list[list[_Sequence]] = []
    for run in runs:
        start = 0
        for size in _pass_sizes(len(run)) if len(run) > 1 else [1]:
            groups.append(run[start : start + size])
            start += size
    return groups
