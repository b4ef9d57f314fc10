"""Penalties and logprobs on logits alone (no model): OpenAI's arithmetic, the top tokens'
order, a mask that reaches the logprobs but not the logits sampling reads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lmsp_jupyter.engine.local.logits import Penalties, TokenLogprobs


def test_penalties_lower_each_generated_token_by_its_count_and_once_for_presence() -> None:
    logits = np.zeros(6, dtype=np.float32)
    penalties = Penalties(frequency=0.5, presence=0.25)
    for token in (1, 1, 3):
        penalties.count(token)
    penalties.apply(logits)
    assert logits.tolist() == [0.0, -1.25, 0.0, -0.75, 0.0, 0.0]


def test_penalties_of_zero_count_nothing_and_touch_nothing() -> None:
    logits = np.arange(4, dtype=np.float32)
    penalties = Penalties(frequency=0.0, presence=0.0)
    penalties.count(2)
    penalties.apply(logits)
    assert not penalties.active and logits.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_logprobs_are_a_log_softmax_and_the_top_is_sorted_ties_by_id() -> None:
    logits = np.array([1.0, 3.0, 3.0, 0.0, -2.0], dtype=np.float32)
    logprobs = TokenLogprobs(logits)
    total = math.log(sum(math.exp(x) for x in logits.tolist()))
    assert logprobs.of(0) == pytest.approx(1.0 - total, abs=1e-6)
    top = logprobs.top(3)
    assert [token for token, _ in top] == [1, 2, 0]
    assert top[0][1] == top[1][1] >= top[2][1]
    assert logprobs.top(0) == []
    assert [token for token, _ in logprobs.top(10)] == [1, 2, 0, 3, 4]


def test_a_mask_reaches_the_logprobs_not_the_logits() -> None:
    logits = np.array([2.0, 1.0, 0.0], dtype=np.float32)

    def only_the_last_two(values: np.ndarray) -> None:
        values[0] = -np.inf

    logprobs = TokenLogprobs(logits, only_the_last_two)
    assert logits.tolist() == [2.0, 1.0, 0.0]
    assert [token for token, _ in logprobs.top(3)] == [1, 2]  # probability 0: left out
    assert math.exp(logprobs.of(1)) + math.exp(logprobs.of(2)) == pytest.approx(1.0)
    assert logprobs.of(0) == -math.inf


def test_far_alternatives_are_found_beyond_the_first_window() -> None:
    logits = np.full(1000, -50.0, dtype=np.float32)
    logits[7], logits[9] = 10.0, -30.0
    assert [token for token, _ in TokenLogprobs(logits).top(2)] == [7, 9]
