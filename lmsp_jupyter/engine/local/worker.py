"""Continuous batching of one model: a worker thread, its sequences, their KV cache slots.

Each step the worker evaluates chunks of new prompts (their starts in block passes of llama.cpp's
fast kernels, their ends in token passes of its reference kernels) and every other running
sequence's next token (side by side in one token pass), samples each sequence as soon as its
pass is read and hands its text to the consumer; ``engine/passes.py`` says why passes have these
shapes. Each slot is a sequence of the llama.cpp context with its own KV cache, its cells in
position order.
A request joins at the next step; one that is cancelled while it waits never reaches the
model. A finished sequence leaves its tokens in its slot's cache, and the next request whose
prompt starts with them (the same system prompt, or a conversation continued with the answer)
evaluates only what is new.
A sequence whose next tokens can be guessed (from a caller's prediction, or from its own
context: ``engine/speculation.py``) reads its token and the guessed ones in a pass of its own;
each position is sampled in order from its own logits, as it would have been one pass at a time,
and the guesses are kept only while they are what was sampled.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..catalog import ModelEntry
from ..generation import (
    EngineError,
    GenerationDone,
    StopReason,
    TextDelta,
    TokenLogprob,
)
from .llama.model import BatchToken, LlamaModel
from .llama.runtime import release_compute_threads
from .llama.sampler import TokenSampler
from .passes import block_end, block_pass_size, decode_pass, pass_size, reusable
from .speculation import MOST_DRAFTED, Draft, Drafter
from .stops import HeldText
from .worker_inputs import EngineSettings, GenerationRequest

log = logging.getLogger(__name__)

#: Prompt tokens one step evaluates while other sequences decode: bounded so that running
#: streams keep their pace while a new prompt is read (a block pass takes up to 128).
PROMPT_TOKENS_WHILE_DECODING = 32
#: Prompt tokens one step evaluates when no sequence decodes (and at most the worker's
#: ``batch_size``); bounds how long a new request or a cancellation waits for the step in
#: progress.
PROMPT_TOKENS_ALONE = 512
#: The share of a prompt, and of a slot's cache, that the two must have in common for the prompt
#: to take that slot rather than an empty one (or the one used longest ago).
MIN_SHARED_PREFIX = 0.1


class _Load:
    """A request to load the model now; ``done`` resolves once it is loaded (or failed)."""

    def __init__(self) -> None:
        self.done: Future[None] = Future()


@dataclass(eq=False)
class _Slot:
    """A sequence id of the context and the tokens its cache holds, position by position."""

    id: int
    tokens: list[int] = field(default_factory=list)
    #: How many of the first ``tokens`` were read in block passes (``engine/passes.py``).
    blocks: int = 0
    sequence: _Sequence | None = None
    used_at: int = 0

    def keep(self, count: int) -> None:
        """Keep the first ``count`` tokens (the model's cache must be cut the same way)."""
        del self.tokens[count:]
        self.blocks = min(self.blocks, count)


@dataclass(eq=False)
class _Sequence:
    """A request being generated: its prompt and output tokens, its sampler and its slot."""

    request: GenerationRequest
    sampler: TokenSampler
    limit: int
    tokens: list[int]
    text: HeldText
    slot: _Slot | None = None
    cached_tokens: int = 0
    generated: int = 0
    #: Logprobs of the tokens whose text is still held back (asked for in ``top_logprobs``).
    held_logprobs: list[TokenLogprob] = field(default_factory=list)
    #: Its drafts, when it may speculate.
    drafter: Drafter | None = None
    done: bool = False

    @property
    def pending(self) -> int:
        """Tokens not yet in the cache: the prompt's rest, or the last sampled token and any
        the schema forced after it."""
        assert self.slot is not None
        return len(self.tokens) - len(self.slot.tokens)

    @property
    def prompt_left(self) -> int:
        """Prompt tokens not yet in the cache."""
        assert self.slot is not None
        return max(0, len(self.request.prompt.tokens) - len(self.slot.tokens))

    @property
    def blocks(self) -> int:
        """How many of the prompt's first tokens are read in block passes."""
        prompt = self.request.prompt
        return block_end(len(prompt.tokens), prompt.stable_until)


class ModelWorker:
    """One model's thread, context and sequences. ``submit`` and ``close`` are thread-safe."""

    def __init__(self, entry: ModelEntry, settings: EngineSettings) -> None:
        self.entry = entry
        self.settings = settings
        self._inbox: queue.SimpleQueue[GenerationRequest | _Load | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._model: LlamaModel | None = None
        self._waiting: deque[GenerationRequest] = deque()
        self._running: list[_Sequence] = []
        self._slots = [_Slot(id) for id in range(settings.parallel)]
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
            while True:
                idle = not (self._running or self._waiting)
                if idle:
                    release_compute_threads()
                if not self._take(block=idle):
                    break
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
                sequences=len(self._slots),
                threads=self.settings.threads,
                most=self.settings.batch_size,
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
        tokens = list(prompt)
        drafter = None
        # A schema-constrained sequence drafts too: each verified position is drawn under the
        # matcher as it stands after the tokens before it, and tokens the schema forces end
        # the verification (they are read in passes of their own).
        if self.settings.speculation and request.params.speculation:
            drafter = Drafter(tokens, request.prediction, model.output_tile)
        return _Sequence(
            request, sampler, limit, tokens, HeldText(request.params.stop), drafter=drafter
        )

    def _place(self, sequence: _Sequence) -> None:
        """Give ``sequence`` the free slot whose cache shares the longest prefix with it, when
        that prefix is at least a tenth of the longer of its prompt and the cache (as
        llama-server's default ``--slot-prompt-similarity``, which looks at the prompt only);
        else an empty slot, else the one used longest ago. So a request that shares only its
        first tokens with a cache (``<bos>``, a chat turn's start) does not overwrite it: the
        next keystroke's completion, or the conversation's next turn, finds it whole."""
        assert self._model is not None
        free = [slot for slot in self._slots if slot.sequence is None]
        reuse = {slot.id: self._reusable(slot, sequence) for slot in free}
        hits = {
            slot.id: reuse[slot.id]
            if reuse[slot.id] >= MIN_SHARED_PREFIX * max(len(sequence.tokens), len(slot.tokens))
            else 0
            for slot in free
        }
        slot = max(free, key=lambda s: (hits[s.id], not s.tokens, -s.used_at))
        kept = reuse[slot.id]
        self._model.forget(slot.id, kept)
        slot.keep(kept)
        slot.sequence, sequence.slot = sequence, slot
        if sequence.generated == 0:
            sequence.cached_tokens = kept

    @staticmethod
    def _reusable(slot: _Slot, sequence: _Sequence) -> int:
        """How many of the prompt tokens of ``sequence`` ``slot``'s cache can serve: as far as
        both agree, leaving the last prompt token to evaluate, whose logits give the first
        output token, and each token computed in the regime the prompt gives it
        (``engine/passes.py``).

        A cache trimmed to a prefix stays whole with sliding-window attention too: each
        sequence has a stream of its own, as long as the context, and llama.cpp puts new tokens
        in the free cells after its head, which never wraps around onto the window's old cells.
        """
        tokens = sequence.tokens
        limit = min(len(slot.tokens), len(tokens) - 1)
        same = 0
        while same < limit and slot.tokens[same] == tokens[same]:
            same += 1
        return reusable(same, slot.blocks, sequence.blocks)

    def _step(self) -> None:
        """One step: chunks of new prompts, up to a budget that keeps the streams' pace, then
        every other running sequence's next token; each sequence is sampled as soon as its
        last pending token is read."""
        for sequence in list(self._running):
            if sequence.request.cancel.cancelled:
                self._finish(sequence, "cancelled")
        decoding = sorted((s for s in self._running if not s.prompt_left), key=_slot_id)
        budget = PROMPT_TOKENS_WHILE_DECODING if decoding else PROMPT_TOKENS_ALONE
        budget = max(1, min(budget, self.settings.batch_size - len(decoding)))
        for sequence in [s for s in self._running if s.prompt_left]:
            while budget > 0 and sequence.prompt_left:
                assert sequence.slot is not None
                blocks_left = sequence.blocks - len(sequence.slot.tokens)
                if blocks_left > 0:
                    size = block_pass_size(blocks_left, most=budget)
                    self._prompt_pass(sequence, size, block=True)
                else:
                    size = pass_size(sequence.prompt_left, most=budget)
                    self._prompt_pass(sequence, size)
                budget -= size
        singles: dict[int, _Sequence] = {}
        drafts: list[tuple[_Sequence, Draft, int]] = []
        sharing = sum(1 for s in decoding if s.pending == 1)
        for sequence in decoding:
            if sequence.pending != 1:
                self._forced_passes(sequence)
                continue
            planned = self._draft(sequence, sharing)
            if planned is None:
                singles[_slot_id(sequence)] = sequence
            else:
                drafts.append((sequence, *planned))
                sharing -= 1
        if singles:
            self._decode_pass(decode_pass(sorted(singles)), singles)
        for sequence, draft, size in drafts:
            self._speculative_pass(sequence, draft, size)

    @staticmethod
    def _draft(sequence: _Sequence, sharing: int) -> tuple[Draft, int] | None:
        """The draft ``sequence`` verifies this step and how many of its tokens, when that is
        faster than reading its token beside the ``sharing`` sequences (itself among them)."""
        drafter = sequence.drafter
        if drafter is None:
            return None
        left = sequence.limit - sequence.generated  # tokens it may still produce
        draft = drafter.draft(min(MOST_DRAFTED, left - 1))
        if draft is None:
            drafter.idle()
            return None
        size = drafter.size(draft, sharing)
        return (draft, size) if size else None

    def _speculative_pass(self, sequence: _Sequence, draft: Draft, size: int) -> None:
        """Evaluate ``sequence``'s sampled token and the first ``size`` tokens of ``draft``
        after it in one pass of its own, then sample position after position while the draft
        is what was sampled; the cache of the positions after that is dropped."""
        assert self._model is not None and sequence.slot is not None
        assert sequence.drafter is not None
        slot = sequence.slot
        start = len(slot.tokens)
        inputs = [sequence.tokens[start], *draft.tokens[:size]]
        self._model.decode(
            [BatchToken(token, start + i, slot.id, True) for i, token in enumerate(inputs)]
        )
        slot.tokens.append(inputs[0])
        for row in range(size + 1):
            sampled = sequence.sampler.next(row)
            same = False
            if row < size:
                guess = inputs[row + 1]
                same = sampled == [guess] and not self._model.ends(guess)
                sequence.drafter.observe(draft, same)
            self._advance(sequence, sampled)
            if not same or sequence.done:
                break
            slot.tokens.append(inputs[row + 1])
        self._model.forget(slot.id, len(slot.tokens))

    def _prompt_pass(self, sequence: _Sequence, size: int, block: bool = False) -> None:
        """Evaluate the next ``size`` prompt tokens of ``sequence`` in one pass (a ``block``
        pass, or a token pass); sample it once its prompt is read."""
        if self._read(sequence, size, block):
            self._advance(sequence, sequence.sampler.next(size - 1))

    def _forced_passes(self, sequence: _Sequence) -> None:
        """Evaluate a sampled token and the tokens the schema forced after it, in passes of
        ``sequence``'s own, then sample it."""
        size = pass_size(sequence.pending)
        while not self._read(sequence, size):
            size = pass_size(sequence.pending)
        self._advance(sequence, sequence.sampler.next(size - 1))

    def _read(self, sequence: _Sequence, size: int, block: bool = False) -> bool:
        """Evaluate the next ``size`` pending tokens of ``sequence`` in one pass of its own (a
        ``block`` pass, or a token pass); whether that read all its pending tokens (the last
        one's logits are kept, at index ``size - 1``)."""
        assert self._model is not None and sequence.slot is not None
        slot = sequence.slot
        start, end = len(slot.tokens), len(slot.tokens) + size
        last = end == len(sequence.tokens)
        batch = [
            BatchToken(sequence.tokens[p], p, slot.id, last and p == end - 1)
            for p in range(start, end)
        ]
        self._model.decode(batch, block)
        slot.tokens.extend(sequence.tokens[start:end])
        if block:
            slot.blocks = end
        return last

    def _decode_pass(self, ids: range, decoding: dict[int, _Sequence]) -> None:
        """Evaluate, in one pass, the last sampled token of each sequence of ``decoding``
        whose slot is in ``ids`` and a padding token for each other sequence there (their
        cache is dropped right after), then sample each decoding sequence."""
        assert self._model is not None
        batch: list[BatchToken] = []
        rows: list[tuple[_Sequence, int]] = []
        for id in ids:
            slot = self._slots[id]
            sequence = decoding.get(id)
            if sequence is not None:
                position = len(slot.tokens)
                rows.append((sequence, len(batch)))
                batch.append(BatchToken(sequence.tokens[position], position, id, True))
            else:
                batch.append(BatchToken(0, self._pad_position(slot), id, False))
        try:
            self._model.decode(batch)
        finally:
            for item in batch:
                if not item.logits:
                    self._model.forget(item.sequence, item.position)
        for sequence, row in rows:
            assert sequence.slot is not None
            sequence.slot.tokens.append(sequence.tokens[len(sequence.slot.tokens)])
            self._advance(sequence, sequence.sampler.next(row))

    def _pad_position(self, slot: _Slot) -> int:
        """Where a padding token goes in ``slot``'s sequence."""
        assert self._model is not None
        if len(slot.tokens) >= self._model.cells:  # an idle cache as long as the context
            assert slot.sequence is None
            self._model.forget(slot.id)
            slot.keep(0)
        return len(slot.tokens)

    def _advance(self, sequence: _Sequence, tokens: list[int]) -> None:
        """Take ``sequence``'s next ``tokens`` (sampled, or forced by its schema): text out,
        or the end."""
        assert self._model is not None
        logprobs = sequence.sampler.logprobs
        for index, token in enumerate(tokens):
            if self._model.ends(token):
                self._finish(sequence, "stop")
                return
            sequence.sampler.accept(token)
            sequence.tokens.append(token)
            sequence.generated += 1
            if logprobs:
                sequence.held_logprobs.append(logprobs[index])
            text, stopped = sequence.text.feed(self._model.piece(token))
            if text:
                sequence.request.emit(TextDelta(text, self._take_logprobs(sequence)))
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
            request.emit(TextDelta(tail, self._take_logprobs(sequence)))
        request.emit(
            GenerationDone(
                reason=reason,
                prompt_tokens=len(request.prompt.tokens),
                output_tokens=sequence.generated,
                cached_tokens=sequence.cached_tokens,
                **_draft_usage(sequence.drafter),
            )
        )
        sequence.done = True
        sequence.sampler.close()
        self._running.remove(sequence)
        if sequence.slot is not None:
            self._clock += 1
            sequence.slot.sequence, sequence.slot.used_at = None, self._clock

    @staticmethod
    def _take_logprobs(sequence: _Sequence) -> tuple[TokenLogprob, ...]:
        """The held logprobs, which go out with the text their tokens produced."""
        held = tuple(sequence.held_logprobs)
        sequence.held_logprobs.clear()
        return held

    def _fail_running(self, exc: BaseException) -> None:
        """A failed batch fails every sequence in it; the caches are dropped, the worker goes on."""
        for sequence in list(self._running):
            sequence.request.emit(exc)
            sequence.sampler.close()
            self._running.remove(sequence)
        for slot in self._slots:
            slot.sequence = None
            slot.keep(0)
            if self._model is not None:
                self._model.forget(slot.id)


def _slot_id(sequence: _Sequence) -> int:
    assert sequence.slot is not None
    return sequence.slot.id


def _draft_usage(drafter: Drafter | None) -> dict[str, int]:
    """What a sequence's ``GenerationDone`` says of its drafts."""
    if drafter is None:
        return {}
    return {
        "accepted_draft_tokens": drafter.accepted,
        "accepted_prediction_tokens": drafter.accepted_prediction,
        "rejected_prediction_tokens": drafter.rejected_prediction,
    }
