"""Draft tokens for a sequence to verify in one pass: the text a caller predicted, or what
followed the latest earlier occurrence of the sequence's last tokens (prompt lookup), and how
many of them to verify so that a pass is never slower than reading one token.

Drafts change only how many positions a pass reads, never what is sampled: the batching
worker samples each verified position from its own logits, in order, and keeps a draft token
only while it equals what was sampled (``engine/local/worker.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .passes import PASS_MAX

#: The n-gram lengths looked up in the sequence's context, longest first.
NGRAMS = (4, 3, 2)
#: The most draft tokens one pass verifies for a sequence: as many as a token pass holds
#: (``engine/passes.py``); the cost model decides how many of them pay. Counted passes
#: (``benchmarks/speculation.py --passes``): JSON/CSV continuations need a sixth fewer passes
#: than with 16 at most, other kinds about as many.
MOST_DRAFTED = PASS_MAX - 1
#: The n-gram lengths that realign a prediction the answer strayed from, longest first.
PREDICTION_NGRAMS = (8, 4, 2)

#: Milliseconds of a pass of one token of each of ``n`` sequences and of a pass of ``1 + k``
#: tokens of one sequence, fitted to ``benchmarks/pass_sizes.py`` on 2 cores (1 / 2 / 4 / 8
#: sequences: 21 / 22.7 / 30.0 / 46.6 ms; 2 / 8 tokens of one: 20.9 / 30.6 ms). Only their
#: ratios matter: they weigh a draft's likely gain against the pass width it costs. A
#: verification keeps the logits of each of its tokens, which costs more (``LOGITS_MS`` each)
#: than this model of its own pass counts; the model errs toward longer drafts on purpose:
#: drafts are kept in runs (a copied passage), longer than a rate per token predicts, and
#: counted passes priced with ``LOGITS_MS`` came out faster with it than with it counted.
_SHARED_BASE_MS, _SHARED_PER_TOKEN_MS = 17.0, 3.7
_OWN_BASE_MS, _OWN_PER_TOKEN_MS = 19.0, 2.0
#: What keeping a token's logits adds to a pass, in the model's output layer: 8 sequences' tokens
#: against 8 prompt tokens (one of them with logits), 46.6 against 30.6 ms.
LOGITS_MS = 2.3
#: What a pass whose rows of logits are not a whole number of the output layer's tiles adds: a
#: second sweep over its weights (``output_tile`` in ``engine/local/llama/runtime.py``; 11–17 ms
#: measured with ``benchmarks/pass_sizes.py --widths``, in this model's scale).
_LEFT_OVER_MS = 12.0
#: A draft must promise this much more throughput than reading one token; what the cost model
#: gets wrong on another CPU stays within it.
_MARGIN = 1.1
#: The acceptance rate a sequence starts with: per draft token, from its context or from a
#: caller's prediction.
_PRIOR_CONTEXT, _PRIOR_PREDICTION = 0.5, 0.9
#: How much one compared token moves the rate, and how fast an idle rate drifts back to the prior
#: (so that a sequence which stopped drafting tries again later).
_LEARNING, _DRIFT = 0.2, 0.01


def left_over_ms(rows: int, tile: int) -> float:
    """What the cost model adds to a pass keeping ``rows`` rows of logits when the kernels
    compute them ``tile`` at a time: nothing when they fill whole tiles, or fit in one."""
    return _LEFT_OVER_MS if rows > tile and rows % tile else 0.0


def shared_pass_ms(sequences: int, tile: int = 1) -> float:
    """The cost model of a pass reading one token of each of ``sequences`` sequences."""
    if not sequences:
        return 0.0
    return _SHARED_BASE_MS + _SHARED_PER_TOKEN_MS * sequences + left_over_ms(sequences, tile)


def own_pass_ms(drafted: int, tile: int = 1) -> float:
    """The cost model of a pass of its own reading a token and ``drafted`` draft tokens."""
    rows = 1 + drafted
    return _OWN_BASE_MS + _OWN_PER_TOKEN_MS * rows + left_over_ms(rows, tile)


def expected_accepted(rate: float, drafted: int) -> float:
    """Draft tokens one verification keeps on average when each is kept with ``rate`` while
    the ones before it were."""
    return sum(rate**i for i in range(1, drafted + 1))


@dataclass(frozen=True)
class Draft:
    """Tokens to verify after a sequence's next token, and where they came from."""

    tokens: list[int]
    from_prediction: bool


class Drafter:
    """One sequence's drafts: its prediction first, then its own context, and its record of
    how many were kept."""

    def __init__(self, tokens: list[int], prediction: Sequence[int] = (), tile: int = 1) -> None:
        """``tile``: the rows of logits the model's kernels compute at a time (``output_tile``
        in ``engine/local/llama/runtime.py``), which the cost model weighs."""
        #: The sequence's tokens (its prompt, then its answer), growing as it is generated.
        self._tokens = tokens
        self._tile = tile
        self._answer_start = len(tokens)
        self._indexed = 1  # n-grams ending before this index are in the table
        self._latest: dict[tuple[int, ...], int] = {}
        self._prediction = list(prediction)
        self._predicted: dict[tuple[int, ...], list[int]] = {}
        for n in PREDICTION_NGRAMS:
            for end in range(n, len(self._prediction)):
                self._predicted.setdefault(tuple(self._prediction[end - n : end]), []).append(end)
        #: Where the answer's next token is in the prediction (``None``: the answer strayed).
        self._cursor: int | None = 0 if self._prediction else None
        self._last_cursor = 0
        self._followed = self._answer_start
        self.rates = {False: _PRIOR_CONTEXT, True: _PRIOR_PREDICTION}
        #: Draft tokens kept, in all and of those from the prediction, and prediction tokens
        #: drafted but not kept.
        self.accepted = 0
        self.accepted_prediction = 0
        self.rejected_prediction = 0

    def draft(self, most: int) -> Draft | None:
        """Up to ``most`` tokens that may follow the sequence's tokens, or ``None``."""
        if most <= 0:
            return None
        tokens = self._from_prediction(most)
        if tokens:
            return Draft(tokens, True)
        tokens = self._from_context(most)
        return Draft(tokens, False) if tokens else None

    def _from_prediction(self, most: int) -> list[int]:
        tokens, prediction = self._tokens, self._prediction
        if not prediction:
            return []
        for token in tokens[self._followed :]:  # the answer's tokens since the last draft
            if self._cursor is not None and self._cursor < len(prediction):
                self._cursor = self._cursor + 1 if prediction[self._cursor] == token else None
            else:
                self._cursor = None
        self._followed = len(tokens)
        if self._cursor is None:
            self._cursor = self._realigned()
        if self._cursor is None:
            return []
        self._last_cursor = self._cursor
        return prediction[self._cursor : self._cursor + most]

    def _realigned(self) -> int | None:
        """Where in the prediction the answer's last tokens are: the first such place after
        where it last was, else the first."""
        answer = len(self._tokens) - self._answer_start
        for n in PREDICTION_NGRAMS:
            if n <= answer:
                ends = self._predicted.get(tuple(self._tokens[-n:]))
                if ends:
                    return next((end for end in ends if end >= self._last_cursor), ends[0])
        return None

    def _from_context(self, most: int) -> list[int]:
        tokens = self._tokens
        latest = self._latest
        for end in range(self._indexed, len(tokens)):  # n-grams whose next token is known
            for n in NGRAMS:
                if n <= end:
                    latest[tuple(tokens[end - n : end])] = end
        self._indexed = len(tokens)
        for n in NGRAMS:
            if n < len(tokens):
                found = latest.get(tuple(tokens[-n:]))
                if found is not None:
                    return tokens[found : found + most]
        return []

    def size(self, draft: Draft, sharing: int) -> int:
        """How many of ``draft``'s tokens to verify in a pass of the sequence's own, while
        ``sharing`` sequences (this one among them) would read their token in one pass; 0:
        reading just its token in that pass is faster.

        A verification that would leave rows of logits over the kernels' last whole tile takes
        draft tokens up to the next tile instead, when the draft has them: a second sweep over
        the output layer costs more than the rows that fill the tile. Otherwise it keeps
        whichever the cost model prefers, the whole tiles or the rows left over.
        """
        best = self._best(draft, sharing)
        rows, tile = 1 + best, self._tile
        if best and rows > tile and rows % tile:
            filled, whole = best + tile - rows % tile, best - rows % tile
            if filled <= len(draft.tokens):
                return filled
            if self._gain(draft, sharing, whole, tile) > self._gain(draft, sharing, best, tile):
                return whole
        return best

    def _best(self, draft: Draft, sharing: int) -> int:
        """The draft length the cost model gains most by, whatever the kernels' tiles."""
        best, best_gain = 0, _MARGIN
        for drafted in range(1, len(draft.tokens) + 1):
            gain = self._gain(draft, sharing, drafted, 1)
            if gain > best_gain:
                best, best_gain = drafted, gain
        if not best:
            self.idle()
        return best

    def _gain(self, draft: Draft, sharing: int, drafted: int, tile: int) -> float:
        """The cost model's throughput with ``drafted`` of ``draft``'s tokens verified in a pass
        of the sequence's own, over its throughput reading its token beside the ``sharing``."""
        tokens = sharing + expected_accepted(self.rates[draft.from_prediction], drafted)
        cost = shared_pass_ms(sharing - 1, tile) + own_pass_ms(drafted, tile)
        return tokens / cost * shared_pass_ms(sharing, tile) / sharing

    def idle(self) -> None:
        """A step without drafts: the rates drift back toward their priors."""
        self.rates[False] += (_PRIOR_CONTEXT - self.rates[False]) * _DRIFT
        self.rates[True] += (_PRIOR_PREDICTION - self.rates[True]) * _DRIFT

    def observe(self, draft: Draft, kept: bool) -> None:
        """One token of ``draft`` was compared with what the model sampled there: ``kept``
        when they were the same."""
        rate = self.rates[draft.from_prediction]
        self.rates[draft.from_prediction] = rate + (kept - rate) * _LEARNING
        self.accepted += kept
        if draft.from_prediction:
            self.accepted_prediction += kept
            self.rejected_prediction += not kept
