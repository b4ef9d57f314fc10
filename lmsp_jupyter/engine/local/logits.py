"""What the engine does to one sequence's logits before a token is drawn, and what it reads
from them: OpenAI's repetition penalties, and token logprobs.

Both work on the logits of one token alone, in the same arithmetic whatever else shares its
pass, so they keep the engine's promise: the same tokens and values alone, batched or cached.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import numpy.typing as npt


class Penalties:
    """OpenAI's ``frequency_penalty`` and ``presence_penalty`` over one sequence's output.

    Every token the sequence generates (drawn, or forced by its schema) is ``count``-ed; before
    the next draw ``apply`` lowers each counted token's logit by ``frequency`` times its count
    plus ``presence``. Only the tokens generated so far are touched, so it costs next to nothing.
    """

    def __init__(self, frequency: float, presence: float) -> None:
        self.frequency = frequency
        self.presence = presence
        self._counts: Counter[int] = Counter()

    @property
    def active(self) -> bool:
        """Whether the penalties change anything."""
        return bool(self.frequency or self.presence)

    def count(self, token: int) -> None:
        """Note that the sequence generated ``token``."""
        if self.active:
            self._counts[token] += 1

    def apply(self, logits: npt.NDArray[np.float32]) -> None:
        """Lower, in place, the logits of the tokens generated so far."""
        if not self._counts:
            return
        tokens = np.fromiter(self._counts, dtype=np.int64, count=len(self._counts))
        counts = np.fromiter(self._counts.values(), dtype=np.float64, count=len(self._counts))
        penalty = counts * self.frequency + self.presence
        logits[tokens] = logits[tokens] - penalty.astype(np.float32)


class TokenLogprobs:
    """The log-probabilities of one distribution over the vocabulary (a log-softmax of a copy
    of the logits): the drawn token's, and the ``top`` most likely. About 2 ms for Gemma 3's
    262,144 tokens, which is why the engine computes them only when asked."""

    def __init__(
        self,
        logits: npt.NDArray[np.float32],
        mask: Callable[[npt.NDArray[np.float32]], None] | None = None,
    ) -> None:
        values = np.array(logits, dtype=np.float32)  # a copy: the mask must not reach sampling
        if mask is not None:
            mask(values)
        self._values = values
        self._max = float(values.max())
        shifted = values - np.float32(self._max)
        self._log_total = float(np.log(np.exp(shifted).sum()))

    def of(self, token: int) -> float:
        """The logprob of ``token``."""
        return float(self._values[token]) - self._max - self._log_total

    def top(self, count: int) -> list[tuple[int, float]]:
        """The ``count`` most likely tokens and their logprobs, most likely first (ties: the
        lower token id first, as greedy decoding picks); tokens of probability 0 left out."""
        values = self._values
        count = min(count, len(values))
        if count <= 0:
            return []
        margin = 4.0  # the top tokens lie within a few units of the largest logit: look there
        near = np.flatnonzero(values >= self._max - margin)
        while len(near) < count and np.isfinite(margin):
            margin = margin * 4 if margin < 1e3 else np.inf
            near = np.flatnonzero(values >= self._max - margin)
        floor = np.partition(values[near], len(near) - count)[len(near) - count]
        tied = near[values[near] >= floor]  # every token as likely as the last one kept
        order = np.lexsort((tied, -values[tied]))[:count]
        return [
            (int(tied[i]), self.of(int(tied[i]))) for i in order if np.isfinite(values[tied[i]])
        ]
