"""One timed generation, and the medians and spreads the benchmarks print."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Sample:
    """One timed generation; times are seconds since the call (or request) started.

    ``first_s`` and ``last_s`` are the arrivals of the first and the last token, ``end_s`` that
    of the end of the stream (the final event; the closing chunk of llama-cpp-python).
    ``background`` is the share of the machine's CPU other processes used meanwhile.
    """

    tokens: int
    first_s: float
    last_s: float
    end_s: float
    text: str = field(default="", repr=False)
    background: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        """End-to-end rate: prompt processing included."""
        return self.tokens / self.end_s

    @property
    def decode_tokens_per_s(self) -> float:
        """Decode-only rate: the tokens after the first over the time from first to last."""
        span = self.last_s - self.first_s
        return (self.tokens - 1) / span if span > 0 else float("nan")

    @property
    def ttft_ms(self) -> float:
        """Time to first token in milliseconds."""
        return self.first_s * 1000


def median(items: Iterable[T], metric: Callable[[T], float]) -> float:
    """The median of ``metric`` over ``items``."""
    return statistics.median(metric(item) for item in items)


def spread(values: list[float], spec: str) -> str:
    """``median (quartiles low to high)`` of ``values``, each formatted with ``spec``."""
    if len(values) < 2:
        return format(values[0], spec)
    low, mid, high = statistics.quantiles(values, n=4, method="inclusive")
    return f"{mid:{spec}} (quartiles {low:{spec}} to {high:{spec}})"


def num(value: float, spec: str) -> str:
    """``value`` formatted, or ``-`` when it was not measured (NaN)."""
    return "-" if math.isnan(value) else format(value, spec)
