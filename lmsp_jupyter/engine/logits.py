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
    """The log-probabilities of one distribution over the vocabulary (a log-softmax in double
    precision, of a copy of the logits): the drawn token's, and the ``top`` most likely."""

    def __init__(
        self,
        logits: npt.NDArray[np.float32],
        mask: Callable[[npt.NDArray[np.float32]], None] | None = None,
    ) -> None:
        values = np.array(logits, dtype=np.float32)  # a copy: the mask must not reach sampling
        if mask is not None:
            mask(values)
        shifted = values.astype(np.float64)
        shifted -= shifted.max()
        self._logprobs = shifted - np.log(np.exp(shifted).sum())

    def of(self, token: int) -> float:
        """The logprob of ``token``."""
        return float(self._logprobs[token])

    def top(self, count: int) -> list[tuple[int, float]]:
        """The ``count`` most likely tokens and their logprobs, most likely first (ties: the
        lower token id first, as greedy decoding picks); tokens of probability 0 left out."""
        if count <= 0:
            return []
        logprobs = self._logprobs
        count = min(count, len(logprobs))
        candidates = np.argpartition(-logprobs, count - 1)[:count]
        floor = logprobs[candidates].min()
        tied = np.flatnonzero(logprobs >= floor)  # every token as likely as the last one kept
        order = np.lexsort((tied, -logprobs[tied]))[:count]
        return [
            (int(tied[i]), float(logprobs[tied[i]]))
            for i in order
            if np.isfinite(logprobs[tied[i]])
        ]
