"""Several servers on one store: each runs its own tasks under a lease, and only what a gone
server held (its lease lapsed or released) is ended by another; a task is followed and
cancelled from any of them. Each test runs on a SQLite file and on a PostgreSQL database.

Each "server" here is a task service with a store of its own (its own connections) on one
store; a server that died is what a killed one leaves in the store: its lease row and its
unfinished task.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import time
from typing import Any

import pytest

from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.tasks import Task
from lmsp_jupyter.service.idempotency import Claim, IdempotencyKeys
from lmsp_jupyter.service.leases import process_gone, process_start, this_machine
from lmsp_jupyter.service.limits import OwnerLimits
from lmsp_jupyter.service.store import open_store
from lmsp_jupyter.service.store.interface import Database, Row
from lmsp_jupyter.service.store.records import (
    FinalState,
    IdempotencyRecords,
    LeaseRecords,
    StoredEvent,
    TaskLost,
    TaskRecords,
)
from lmsp_jupyter.service.tasks import TaskService
from tests.conftest import MODEL, Stores
from tests.doubles import ScriptedEngine
from tests.helpers import eventually, eventually_async
from tests.service.helpers import follow_all, services, wait_final

OWNER = "jupyter"
BODY: dict[str, Any] = {"type": "response", "request": {"model": MODEL, "input": "x"}}
#: A lease no test outlives: a server holding it is alive for the whole test.
LONG = 3600.0


def server(
    store: Database,
    *,
    deltas: int = 3,
    delay: float = 0.0,
    lease: float = LONG,
    limits: OwnerLimits | None = None,
) -> TaskService:
    """A server's task service on ``store``, its lease taken."""
    engine = ScriptedEngine(deltas=["a"] * deltas, delay=delay)
    return services(engine, store, lease_seconds=lease, limits=limits)[1]


def dead_server(
    store: Database,
    *,
    lapsed: bool,
    machine: str | None = None,
    process: tuple[int, int] = (1, 0),
) -> tuple[str, str]:
    """What a killed server leaves: its lease (``lapsed`` or not yet; of ``process``, its pid
    and start, on ``machine``) and one task it was running, two events in; returns the holder
    and the task id."""
    at = time.time()
    pid, start = process
    LeaseRecords(store).hold(
        "dead",
        host="h",
        pid=pid,
        started_at=at,
        at=at,
        until=at - 1 if lapsed else at + LONG,
        machine=machine,
        process_start=start,
    )
    records = TaskRecords(store)
    records.insert(
        task_id="task_dead",
        owner=OWNER,
        holder="dead",
        model=MODEL,
        response_id="resp_dead",
        request="{}",
        metadata={"cell": "c1"},
        at=int(at),
    )
    records.started("task_dead", "dead", int(at))
    for event_id in (1, 2):
        records.append("task_dead", "dead", StoredEvent(event_id, "response.created", "{}"))
    return "dead", "task_dead"


def assert_ids_from_1_one_final_last(events: list[StoredEvent]) -> None:
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert [e.is_final for e in events] == [False] * (len(events) - 1) + [True]


# --- the rule in the store ------------------------------------------------------------------------


def test_a_holders_work_is_ended_only_once_its_lease_has_expired(stores: Stores) -> None:
    store = stores.open(stores.new())
    leases, records = LeaseRecords(store), TaskRecords(store)
    assert not leases.hold("a", host="h", pid=1, started_at=0, at=0, until=100)  # taken
    records.insert(
        task_id="t", owner="o", holder="a", model="m", response_id="r", request="{}",
        metadata={}, at=0,
    )  # fmt: skip

    def ending(row: Row) -> tuple[StoredEvent, FinalState]:
        return StoredEvent(1, "response.failed", "{}"), FinalState("failed", None, None, 0)

    assert leases.end_gone(99.9, ending) == 0
    assert leases.hold("a", host="h", pid=1, started_at=0, at=99.9, until=200)  # renewed
    assert leases.end_gone(199.9, ending) == 0
    assert leases.end_gone(200, ending) == 1
    row = records.get("t")
    assert row is not None and row["status"] == "failed"
    assert leases.end_gone(300, ending) == 0  # ended once
    assert not leases.hold("a", host="h", pid=1, started_at=0, at=300, until=400)  # lapsed


def test_the_writes_of_a_task_another_server_ended_are_refused(stores: Stores) -> None:
    url = stores.new()
    holder, task_id = dead_server(stores.open(url), lapsed=True)
    other = server(stores.open(url))
    assert other.recover() == 1
    records = TaskRecords(stores.open(url))
    with pytest.raises(TaskLost):
        records.append(task_id, holder, StoredEvent(3, "response.created", "{}"))
    with pytest.raises(TaskLost):  # nor may another holder write a task not its own
        records.append(task_id, other.lease.holder, StoredEvent(4, "response.created", "{}"))


# --- a dead process of this machine ------------------------------------------------------------


def ended_process() -> tuple[int, int]:
    """The pid and start of a process of this machine that has ended (and was reaped)."""
    child = subprocess.Popen(["sleep", "60"])
    start = process_start(child.pid)
    assert start is not None
    child.kill()
    child.wait()
    return child.pid, start


def test_a_process_is_gone_once_ended_a_zombie_or_its_pid_taken_by_another() -> None:
    me = os.getpid(), process_start(os.getpid())
    assert me[1] is not None
    assert not process_gone(me[0], me[1])
    assert process_gone(me[0], me[1] + 1)  # the pid, reused by a process started later
    assert process_gone(*ended_process())
    child = subprocess.Popen(["sleep", "60"])
    try:
        start = process_start(child.pid)
        assert start is not None and not process_gone(child.pid, start)
        child.kill()
        eventually(lambda: process_start(child.pid) is None, what="the child a zombie")
        assert process_gone(child.pid, start)  # ended, not yet reaped by its parent
    finally:
        child.kill()
        child.wait()
    assert this_machine() is not None


def test_a_dead_server_of_this_machine_has_its_work_ended_at_once(stores: Stores) -> None:
    url = stores.new()
    holder, task_id = dead_server(
        stores.open(url), lapsed=False, machine=this_machine(), process=ended_process()
    )
    keys = IdempotencyRecords(stores.open(url))
    assert keys.claim(OWNER, "k", "print", holder, int(time.time()), 0)
    other = server(stores.open(url))
    assert other.recover() == 1  # its lease holds for an hour
    task = other.get(task_id, OWNER)
    assert task.status == "failed"
    assert task.error is not None and task.error.code == "service_restarted"
    assert keys.get(OWNER, "k") is None
    leases = LeaseRecords(stores.open(url)).of_machine(str(this_machine()))
    assert [row["holder"] for row in leases] == [other.lease.holder]  # the dead one's dropped


def test_a_live_process_or_another_machines_is_left_while_its_lease_holds(stores: Stores) -> None:
    me = (os.getpid(), process_start(os.getpid()) or 0)
    for machine, process in ((this_machine(), me), ("another/1", ended_process())):
        url = stores.new()
        _, task_id = dead_server(stores.open(url), lapsed=False, machine=machine, process=process)
        other = server(stores.open(url))
        assert other.recover() == 0
        assert not other.end_dead()
        assert other.get(task_id, OWNER).status == "in_progress"


async def test_a_follower_ends_a_dead_servers_task_at_once(stores: Stores) -> None:
    url = stores.new()
    _, task_id = dead_server(
        stores.open(url), lapsed=False, machine=this_machine(), process=ended_process()
    )
    follower = server(stores.open(url))  # started before the death: no recovery since
    events = await follow_all(follower, task_id)
    assert_ids_from_1_one_final_last(events)
    assert events[-1].event == "response.failed"
    assert follower.get(task_id, OWNER).error.code == "service_restarted"  # type: ignore[union-attr]


async def test_a_key_in_flight_on_a_dead_server_of_this_machine_is_free_at_once(
    stores: Stores,
) -> None:
    url = stores.new()
    holder, _ = dead_server(
        stores.open(url), lapsed=False, machine=this_machine(), process=ended_process()
    )
    records = IdempotencyRecords(stores.open(url))
    assert records.claim(OWNER, "k", "print", holder, int(time.time()), 0)
    tasks = server(stores.open(url))
    keys = IdempotencyKeys(records, tasks.lease.holder, end_dead=tasks.end_dead)

    async def answer(claim: Claim | None) -> tuple[int, str]:
        return 200, "{}"

    outcome = await keys.once(OWNER, "k", "print", answer, wait_if_running=False)
    assert outcome is not None and not outcome.replayed
    assert tasks.get("task_dead", OWNER).status == "failed"


# --- tasks ---------------------------------------------------------------------------------------


async def test_a_live_servers_running_task_survives_another_servers_start_and_completes(
    stores: Stores,
) -> None:
    url = stores.new()
    first = server(stores.open(url), deltas=20, delay=0.02)
    task = await first.create(BODY, OWNER)

    async def running() -> bool:
        return first.get(task.id, OWNER).last_event_id >= 3

    await eventually_async(running, what="the task running")
    second = server(stores.open(url))
    assert second.recover() == 0
    assert second.renew() == 0
    assert second.get(task.id, OWNER).status == "in_progress"
    done = await wait_final(first, task.id)
    assert done.status == "completed"
    assert second.get(task.id, OWNER) == done
    assert [t.id for t in second.list(OWNER)] == [t.id for t in first.list(OWNER)] == [task.id]


async def test_a_gone_servers_task_is_left_while_its_lease_holds_then_failed(
    stores: Stores,
) -> None:
    url, lapsed_url = stores.new(), stores.new()
    _, task_id = dead_server(stores.open(url), lapsed=False)
    other = server(stores.open(url))
    assert other.recover() == 0
    assert other.get(task_id, OWNER).status == "in_progress"
    _, lapsed_id = dead_server(stores.open(lapsed_url), lapsed=True)
    later = server(stores.open(lapsed_url))
    assert later.recover() == 1
    task = later.get(lapsed_id, OWNER)
    assert task.status == "failed"
    assert task.error is not None and task.error.code == "service_restarted"
    assert task.result is not None and task.result.metadata == {"cell": "c1"}
    events = await follow_all(later, lapsed_id)
    assert_ids_from_1_one_final_last(events)
    assert events[-1].event == "response.failed" and task.last_event_id == 3


async def test_a_servers_lease_lapses_when_it_stops_renewing_and_then_its_tasks_fail(
    stores: Stores,
) -> None:
    url = stores.new()
    gone = server(stores.open(url), lease=0.2)  # renews no more: as if killed after starting
    gone.records.insert(
        task_id="t", owner=OWNER, holder=gone.lease.holder, model=MODEL, response_id="r",
        request="{}", metadata={}, at=1,
    )  # fmt: skip
    other = server(stores.open(url))

    async def failed() -> bool:
        other.renew()
        return other.get("t", OWNER).status == "failed"

    await eventually_async(failed, what="the stopped server's task failed")


async def test_a_server_stopping_cleanly_fails_what_it_cut_short_and_nothing_of_the_others(
    stores: Stores,
) -> None:
    url = stores.new()
    stopping = server(stores.open(url), deltas=500, delay=0.02)
    staying = server(stores.open(url), deltas=500, delay=0.02)
    cut = await stopping.create(BODY, OWNER)
    kept = await staying.create(BODY, OWNER)
    await stopping.close()
    task = staying.get(cut.id, OWNER)
    assert task.status == "failed" and task.error is not None
    assert task.error.code == "service_restarted"
    assert staying.get(kept.id, OWNER).status in ("queued", "in_progress")
    assert staying.renew() == 0
    staying.cancel(kept.id, OWNER)
    assert (await wait_final(staying, kept.id)).status == "cancelled"


async def test_a_server_whose_lease_lapsed_stops_a_task_another_server_failed(
    stores: Stores,
) -> None:
    url = stores.new()
    stalled = server(stores.open(url), deltas=500, delay=0.02, lease=0.2)
    task = await stalled.create(BODY, OWNER)
    follower = asyncio.create_task(follow_all(stalled, task.id))
    other = server(stores.open(url))

    async def failed() -> bool:
        return other.recover() == 1

    await eventually_async(failed, what="the stalled server's task failed by the other")
    live = await follower  # the stalled server's followers end with the stored final event
    assert_ids_from_1_one_final_last(live)
    assert live[-1].event == "response.failed"
    done = await wait_final(stalled, task.id)
    assert done.error is not None and done.error.code == "service_restarted"
    stored = await follow_all(other, task.id)
    assert stored == live  # not one event written after the failure
    stalled.renew()  # its lease taken again: its new tasks run
    again = await stalled.create(BODY, OWNER)
    stalled.cancel(again.id, OWNER)
    assert (await wait_final(stalled, again.id)).status == "cancelled"


async def running_elsewhere(
    stores: Stores, *, deltas: int, delay: float
) -> tuple[TaskService, TaskService, Task]:
    """Two servers on one new store, and a task running on the first, three events in as the
    second reads it."""
    url = stores.new()
    running = server(stores.open(url), deltas=deltas, delay=delay)
    other = server(stores.open(url))
    task = await running.create(BODY, OWNER)

    async def started() -> bool:
        return other.get(task.id, OWNER).last_event_id >= 3

    await eventually_async(started, what="the task running")
    return running, other, task


async def test_another_servers_running_task_is_followed_live_from_the_store(
    stores: Stores,
) -> None:
    running, reader, task = await running_elsewhere(stores, deltas=20, delay=0.05)
    response = reader.response(task.response_id, OWNER)
    assert (response.id, response.status, response.model) == (
        task.response_id,
        "in_progress",
        MODEL,
    )
    from_start, resumed = await asyncio.gather(
        follow_all(reader, task.id), follow_all(reader, task.id, 2)
    )
    everything = await follow_all(running, task.id)
    assert from_start == everything  # every event, once each, the final one last
    assert resumed == everything[2:]
    assert_ids_from_1_one_final_last(everything)
    assert everything[-1].event == "response.completed"
    assert reader.response(task.response_id, OWNER) == running.response(task.response_id, OWNER)


async def test_a_task_is_cancelled_from_another_server(stores: Stores) -> None:
    running, other, task = await running_elsewhere(stores, deltas=5000, delay=0.01)
    follower = asyncio.create_task(follow_all(other, task.id))
    assert other.cancel(task.id, OWNER).status == "in_progress"  # asked; its server stops it
    done = await wait_final(other, task.id)
    assert done.status == "cancelled"
    followed = await follower
    assert followed == await follow_all(running, task.id)
    assert_ids_from_1_one_final_last(followed)
    assert followed[-1].event == "response.cancelled"


async def test_a_queued_task_is_cancelled_from_another_server_at_its_servers_next_renewal(
    stores: Stores,
) -> None:
    url = stores.new()
    running = server(stores.open(url), deltas=5000, delay=0.01)
    other = server(stores.open(url))
    first = await running.create(BODY, OWNER)  # holds the model's one slot
    waiting = await running.create(BODY, OWNER)
    assert other.get(waiting.id, OWNER).status == "queued"
    other.cancel(waiting.id, OWNER)
    assert running.renew() == 0
    done = other.get(waiting.id, OWNER)
    assert done.status == "cancelled" and done.started_at is None
    running.cancel(first.id, OWNER)
    assert (await wait_final(running, first.id)).status == "cancelled"


# --- idempotency keys ----------------------------------------------------------------------------


async def test_a_key_in_flight_on_a_live_server_stays_claimed_on_another(stores: Stores) -> None:
    url = stores.new()
    first_tasks, second_tasks = server(stores.open(url)), server(stores.open(url))
    first = IdempotencyKeys(IdempotencyRecords(stores.open(url)), first_tasks.lease.holder)
    second = IdempotencyKeys(IdempotencyRecords(stores.open(url)), second_tasks.lease.holder)
    gate = asyncio.Event()

    async def slow_create(claim: Claim | None) -> tuple[int, str]:
        await gate.wait()
        assert claim is not None
        task = await first_tasks.create(BODY, OWNER, claim)
        return 202, task.model_dump_json()

    async def never(claim: Claim | None) -> tuple[int, str]:
        raise AssertionError("a key claimed by a live server ran twice")

    running = asyncio.create_task(
        first.once(OWNER, "k", "print", slow_create, wait_if_running=True)
    )
    await asyncio.sleep(0)  # the first attempt claims the key
    with pytest.raises(LmspError) as info:
        await second.once(OWNER, "k", "print", never, wait_if_running=False)
    assert info.value.code == "idempotency_in_progress"
    waiting = asyncio.create_task(second.once(OWNER, "k", "print", never, wait_if_running=True))
    gate.set()
    made, replayed = await running, await waiting
    assert made is not None and replayed is not None
    assert (replayed.replayed, replayed.body) == (True, made.body)
    await wait_final(first_tasks, Task.model_validate_json(made.body).id)


async def test_tasks_created_at_once_on_two_servers_keep_to_the_owners_limit(
    stores: Stores,
) -> None:
    """The limit on an owner's unfinished tasks holds across servers sharing the store, for
    requests made at once; a refused keyed request leaves its key free (no answer stored)."""
    url = stores.new()
    limit = 2
    servers = [
        server(stores.open(url), deltas=200, delay=0.05, limits=OwnerLimits(max_tasks=limit))
        for _ in range(2)
    ]
    keys = IdempotencyKeys(IdempotencyRecords(stores.open(url)), servers[0].lease.holder)

    async def keyed(claim: Claim | None) -> tuple[int, str]:
        return 202, (await servers[0].create(BODY, OWNER, claim)).model_dump_json()

    outcomes = await asyncio.gather(
        *[servers[number % 2].create(BODY, OWNER) for number in range(8)],
        keys.once(OWNER, "k", "print", keyed, wait_if_running=False),
        return_exceptions=True,
    )
    created = [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]
    refused = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert len(created) == limit, refused
    assert all(isinstance(error, LmspError) for error in refused), refused
    assert {error.code for error in refused if isinstance(error, LmspError)} == {"rate_limited"}
    assert TaskRecords(stores.open(url)).unfinished(OWNER) == limit
    if isinstance(outcomes[-1], BaseException):
        assert IdempotencyRecords(stores.open(url)).get(OWNER, "k") is None
    holders = {each.lease.holder: each for each in servers}
    for task in servers[0].list(OWNER, 10, None, {}):
        row = servers[0].records.get(task.id)
        assert row is not None
        running = holders[row["holder"]]
        running.cancel(task.id, OWNER)
        await wait_final(running, task.id)


async def test_a_key_in_flight_on_a_gone_server_is_free_once_its_lease_lapsed(
    stores: Stores,
) -> None:
    url, lapsed = stores.new(), stores.new()
    records = IdempotencyRecords(stores.open(url))
    dead_server(stores.open(url), lapsed=False)
    assert records.claim(OWNER, "k", "print", "dead", int(time.time()), 0)
    keys = IdempotencyKeys(records, server(stores.open(url)).lease.holder)

    async def answer(claim: Claim | None) -> tuple[int, str]:
        return 200, "{}"

    with pytest.raises(LmspError) as info:
        await keys.once(OWNER, "k", "print", answer, wait_if_running=False)
    assert info.value.code == "idempotency_in_progress"
    dead_server(stores.open(lapsed), lapsed=True)
    assert IdempotencyRecords(stores.open(lapsed)).claim(
        OWNER, "k", "print", "dead", int(time.time()), 0
    )
    later = IdempotencyKeys(
        IdempotencyRecords(stores.open(lapsed)), server(stores.open(lapsed)).lease.holder
    )
    outcome = await later.once(OWNER, "k", "print", answer, wait_if_running=False)
    assert outcome is not None and not outcome.replayed
    assert not records.claim(OWNER, "k", "print", "other", int(time.time()), 0)  # one claim wins


# --- processes at once --------------------------------------------------------------------------


def failed_ending(row: Row) -> tuple[StoredEvent, FinalState]:
    """A final event for a gone server's task (none is gone in the test below)."""
    final = FinalState("failed", None, None, 0)
    return StoredEvent(row["last_event_id"] + 1, "response.failed", "{}"), final


def busy_server(url: str, holder: str, events: int, go: Any) -> None:
    """A process that opens the store (new, or being created), takes its lease and writes a
    task's events one transaction each, renewing and recovering every 50."""
    go.wait()
    store = open_store(url)
    leases, records = LeaseRecords(store), TaskRecords(store)

    def renew() -> None:
        at = time.time()
        leases.hold(holder, host="h", pid=0, started_at=at, at=at, until=at + LONG)
        leases.end_gone(at, failed_ending)

    renew()
    records.insert(
        task_id=holder, owner=OWNER, holder=holder, model="m", response_id=f"resp_{holder}",
        request="{}", metadata={}, at=1,
    )  # fmt: skip
    for event_id in range(1, events + 1):
        records.append(holder, holder, StoredEvent(event_id, "response.output_text.delta", "{}"))
        if event_id % 50 == 0:
            renew()
    store.close()


def test_servers_creating_and_writing_one_store_at_once_never_find_it_locked(
    stores: Stores,
) -> None:
    spawn = multiprocessing.get_context("spawn")
    go = spawn.Event()
    url, holders = stores.new(), ["a", "b", "c"]
    processes = [
        spawn.Process(target=busy_server, args=(url, holder, 300, go)) for holder in holders
    ]
    for process in processes:
        process.start()
    go.set()  # all at once, the file not yet made
    for process in processes:
        process.join()
    assert [process.exitcode for process in processes] == [0, 0, 0]  # no "database is locked"
    records = TaskRecords(stores.open(url))
    for holder in holders:
        assert [e.id for e in records.events_after(holder, 0)] == list(range(1, 301))
