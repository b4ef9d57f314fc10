"""The line in front of each model (LMSP 7: slots shared by direct requests and tasks)."""

from __future__ import annotations

import asyncio

import pytest

from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.service.queue import ModelQueue


async def test_requests_take_free_slots_at_once_and_the_rest_wait_in_arrival_order() -> None:
    line = ModelQueue(max_waiting=8)
    first, second = line.join("m", 2), line.join("m", 2)
    third, fourth = line.join("m", 2), line.join("m", 2)
    assert (first.admitted, second.admitted) == (True, True)
    assert (third.position, fourth.position) == (1, 2)
    first.leave()
    await third.wait()
    assert (third.admitted, third.position, fourth.position) == (True, None, 1)


async def test_leaving_the_line_moves_the_ones_behind_up_and_takes_no_slot() -> None:
    line = ModelQueue(max_waiting=8)
    running = line.join("m", 1)
    gone, waiting = line.join("m", 1), line.join("m", 1)
    gone.leave()
    assert waiting.position == 1
    running.leave()
    await waiting.wait()
    assert waiting.admitted
    assert not gone.admitted


async def test_models_have_lines_of_their_own() -> None:
    line = ModelQueue(max_waiting=8)
    line.join("a", 1)
    assert line.join("b", 1).admitted
    assert line.join("a", 1).position == 1


async def test_a_full_line_is_overloaded_with_retry_after() -> None:
    line = ModelQueue(max_waiting=1)
    line.join("a", 1)
    line.check()  # nobody waits yet
    line.join("a", 1)
    with pytest.raises(LmspError) as info:
        line.check()
    assert info.value.code == "overloaded"
    assert info.value.retry_after == 5


async def test_leaving_twice_frees_one_slot_only() -> None:
    line = ModelQueue(max_waiting=8)
    first, second = line.join("m", 1), line.join("m", 1)
    first.leave()
    first.leave()
    await asyncio.wait_for(second.wait(), 1)
    third = line.join("m", 1)
    assert third.position == 1


async def test_priority_requests_wait_before_the_others_in_arrival_order() -> None:
    line = ModelQueue(max_waiting=8)
    running = line.join("m", 1)
    answer = line.join("m", 1)
    first = line.join("m", 1, priority=True)
    second = line.join("m", 1, priority=True)
    later = line.join("m", 1)
    assert (first.position, second.position, answer.position, later.position) == (1, 2, 3, 4)
    running.leave()
    await first.wait()
    assert (second.position, answer.position) == (1, 2)
