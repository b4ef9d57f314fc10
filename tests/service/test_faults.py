"""Every stream ends properly whatever fails inside (6.3), and storage faults (store: SQLite).

A scripted engine injects engine failures and bugs; the store fails for real where the machine
allows it (a locked database; a full or read-only tmpfs, when this process may mount one) and
through a connection wrapper otherwise.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmsp_jupyter.engine.generation import (
    CancelToken,
)
from lmsp_jupyter.protocol.events import OutputItemDone, ResponseEvent, ResponseFailed
from lmsp_jupyter.protocol.tasks import Task
from lmsp_jupyter.server.sse import sse_frame
from lmsp_jupyter.service.channel import Interrupted
from lmsp_jupyter.service.idempotency import Action, Claim, IdempotencyKeys
from lmsp_jupyter.service.store.interface import store_problem
from lmsp_jupyter.service.store.records import IdempotencyRecords, StoredEvent, TaskRecords
from lmsp_jupyter.service.store.sqlite import SqliteStore
from lmsp_jupyter.service.tasks import TaskService
from tests.conftest import MODEL
from tests.doubles import ScriptedEngine
from tests.helpers import eventually_async
from tests.service.helpers import (
    DELTA,
    MESSAGE_DONE,
    MESSAGE_OPEN,
    START,
    follow_all,
    names,
    request,
    services,
    wait_final,
)


class FaultyStore(SqliteStore):
    """A real store whose statements fail while ``fault`` is set and match ``on``."""

    fault: sqlite3.Error | None = None
    on: tuple[str, ...] = ("INSERT", "UPDATE", "DELETE", "COMMIT")
    #: How many statements the fault has failed.
    refused: int = 0

    @property
    def db(self) -> Any:
        return _Faulty(super().db, self)


class _Faulty:
    def __init__(self, real: sqlite3.Connection, store: FaultyStore) -> None:
        self._real, self._store = real, store

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if self._store.fault is not None and sql.lstrip().upper().startswith(self._store.on):
            self._store.refused += 1
            raise self._store.fault
        return self._real.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def assert_one_final_last(events: list[ResponseEvent] | list[StoredEvent]) -> None:
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert [e.is_final for e in events] == [False] * (len(events) - 1) + [True]


def integrity(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as db:
        result: str = db.execute("PRAGMA integrity_check").fetchone()[0]
    return result


# --- direct streams ----------------------------------------------------------------------------


async def test_an_engine_bug_ends_the_stream_with_open_items_done_and_one_failed(
    tmp_path: Path,
) -> None:
    responses, _ = services(
        ScriptedEngine(deltas=("Hel", "lo"), ending="bug"), SqliteStore(tmp_path / "s.db")
    )
    run = await responses.start(request())
    events = [event async for event in responses.events(run, CancelToken())]
    assert names(events) == [*START, *MESSAGE_OPEN, DELTA, DELTA, *MESSAGE_DONE, "response.failed"]
    assert_one_final_last(events)
    done = events[-2].data
    assert isinstance(done, OutputItemDone)
    assert done.item.model_dump()["content"][0]["text"] == "Hello"
    failed = events[-1].data
    assert isinstance(failed, ResponseFailed)
    assert (failed.error.code, failed.error.status) == ("internal_error", 500)
    assert "bug" not in (failed.error.detail or "")  # the log has the cause, not the client
    assert run.response().output == [done.item]


async def test_an_engine_that_stops_without_its_end_fails_the_generation(tmp_path: Path) -> None:
    responses, _ = services(
        ScriptedEngine(deltas=("a",), ending="silent"), SqliteStore(tmp_path / "s.db")
    )
    run = await responses.start(request())
    events = [event async for event in responses.events(run, CancelToken())]
    assert names(events) == [*START, *MESSAGE_OPEN, DELTA, *MESSAGE_DONE, "response.failed"]
    assert events[-1].data.model_dump()["error"]["code"] == "generation_failed"


async def test_a_response_that_cannot_be_stored_ends_with_response_failed(
    tmp_path: Path,
) -> None:
    store = FaultyStore(tmp_path / "s.db")
    responses, _ = services(ScriptedEngine(deltas=("ok",)), store)
    run = await responses.start(request(store=True))
    store.fault = sqlite3.OperationalError("database or disk is full")
    events = [event async for event in responses.events(run, CancelToken())]
    assert names(events) == [*START, *MESSAGE_OPEN, DELTA, *MESSAGE_DONE, "response.failed"]
    assert_one_final_last(events)
    assert run.response().status == "failed"
    store.fault = None
    assert responses.records is not None and responses.records.get(run.id, run.owner) is None
    assert integrity(store.path) == "ok"


# --- tasks ---------------------------------------------------------------------------------------


async def test_a_task_whose_engine_has_a_bug_stores_what_it_streamed(tmp_path: Path) -> None:
    _, tasks = services(
        ScriptedEngine(deltas=("Hel", "lo"), delay=0.01, ending="bug"),
        SqliteStore(tmp_path / "s.db"),
    )
    task = await tasks.create(
        {"type": "response", "request": {"model": MODEL, "input": "x"}}, "jupyter"
    )
    live = await follow_all(tasks, task.id)
    await wait_final(tasks, task.id)
    stored = await follow_all(tasks, task.id)
    assert [sse_frame(e) for e in stored] == [sse_frame(e) for e in live]
    assert names(stored) == [*START, *MESSAGE_OPEN, DELTA, DELTA, *MESSAGE_DONE, "response.failed"]
    assert_one_final_last(stored)
    result = tasks.get(task.id, "jupyter")
    assert result.status == "failed" and result.result is not None
    assert result.last_event_id == len(stored)
    assert result.result.output[0].model_dump()["content"][0]["text"] == "Hello"


async def test_a_task_whose_store_fails_ends_followers_and_is_failed_once_it_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("lmsp_jupyter.service.tasks.STORE_RETRY_SECONDS", 0.01)
    store = FaultyStore(tmp_path / "s.db")
    engine = ScriptedEngine(deltas=("a",) * 50, delay=0.01)
    _, tasks = services(engine, store)
    task = await tasks.create(
        {"type": "response", "request": {"model": MODEL, "input": "x"}}, "jupyter"
    )
    live: list[Any] = []
    async for event in tasks.follow(task.id, "jupyter", 0):
        live.append(event)
        if len(live) == 4:
            store.fault = sqlite3.OperationalError("database or disk is full")
    assert isinstance(live[-1], Interrupted)
    frame = sse_frame(live[-1]).decode()
    received = live[:-1]
    assert frame.startswith(f"id: {len(received)}\nevent: error\ndata: ")  # resume from it
    assert_one_final_last([*received, StoredEvent(len(received) + 1, "response.failed", "{}")])
    refused = store.refused

    async def retried() -> bool:
        return store.refused >= refused + 3

    await eventually_async(retried, what="the service trying to store again")
    assert tasks.get(task.id, "jupyter").status == "in_progress"  # not final until stored
    store.fault = None
    await wait_final(tasks, task.id)
    stored = await follow_all(tasks, task.id)
    assert [sse_frame(e) for e in stored[: len(received)]] == [sse_frame(e) for e in received]
    assert_one_final_last(stored)
    assert stored[-1].event == "response.failed"
    resumed = await follow_all(tasks, task.id, live[-1].last_id)  # from the error event's id
    assert [sse_frame(e) for e in resumed] == [sse_frame(stored[-1])]
    assert tasks.get(task.id, "jupyter").status == "failed"
    assert integrity(store.path) == "ok"


# --- the store itself -----------------------------------------------------------------------------


def one_task(store: SqliteStore, events: int = 0) -> TaskRecords:
    """The task records of ``store``, with one task, ``t``, and its first ``events`` events."""
    records = TaskRecords(store)
    records.insert(
        task_id="t",
        owner="o",
        holder="h",
        model="m",
        response_id="r",
        request="{}",
        at=1,
        metadata={},
    )
    for event_id in range(1, events + 1):
        append_one(records, event_id)
    return records


def append_one(records: TaskRecords, event_id: int) -> None:
    records.append("t", "h", StoredEvent(event_id, "response.created", "{}"))


def event_ids(records: TaskRecords) -> list[int]:
    return [e.id for e in records.events_after("t", 0)]


def test_a_commit_refused_by_a_full_disk_rolls_back_and_the_store_recovers(
    tmp_path: Path,
) -> None:
    store = FaultyStore(tmp_path / "s.db")
    records = one_task(store, events=1)
    store.fault, store.on = sqlite3.OperationalError("database or disk is full"), ("COMMIT",)
    with pytest.raises(sqlite3.OperationalError) as info:
        append_one(records, 2)
    problem = store_problem(info.value)
    assert problem is not None and (problem.code, problem.status) == ("internal_error", 500)
    store.fault = None
    assert event_ids(records) == [1]  # nothing half-written
    append_one(records, 2)
    assert event_ids(records) == [1, 2]
    assert integrity(store.path) == "ok"


def test_a_locked_database_is_503_overloaded_and_the_store_recovers(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", busy_timeout=0.05)
    records = one_task(store)
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError) as info:
            append_one(records, 1)
    finally:
        other.execute("ROLLBACK")
        other.close()
    problem = store_problem(info.value)
    assert problem is not None
    assert (problem.code, problem.status) == ("overloaded", 503)
    assert problem.retry_after == 5
    append_one(records, 1)
    assert event_ids(records) == [1]


@pytest.fixture
def tiny_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (skipped where this process may not mount one)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    with filler.open("wb") as file, contextlib.suppress(OSError):
        while True:
            file.write(b"\0" * 65536)
            file.flush()
    return filler


def test_a_full_disk_fails_writes_and_the_store_recovers_when_space_returns(
    tiny_filesystem: Path,
) -> None:
    store = SqliteStore(tiny_filesystem / "s.db")
    records = one_task(store, events=1)
    filler = fill(tiny_filesystem)
    failures = 0
    for event_id in range(2, 200):  # until a page must grow the file
        try:
            records.append("t", "h", StoredEvent(event_id, "response.created", "x" * 4000))
        except sqlite3.Error as exc:
            problem = store_problem(exc)
            assert problem is not None and problem.status in (500, 503)
            failures += 1
            break
    assert failures == 1
    kept = event_ids(records)
    filler.unlink()
    append_one(records, kept[-1] + 1)
    assert event_ids(records) == [*kept, kept[-1] + 1]
    assert integrity(store.path) == "ok"


def test_a_read_only_file_system_fails_writes_and_the_store_recovers(
    tiny_filesystem: Path,
) -> None:
    store = SqliteStore(tiny_filesystem / "s.db")
    records = one_task(store, events=1)
    store.close()  # a file open for writing keeps the mount from turning read-only
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_filesystem)], check=True)
    try:
        with pytest.raises(sqlite3.Error) as info:
            append_one(records, 2)
        problem = store_problem(info.value)
        assert problem is not None and problem.status in (500, 503)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tiny_filesystem)], check=True)
    append_one(records, 2)
    assert event_ids(records) == [1, 2]
    assert integrity(store.path) == "ok"


# --- a task and its idempotency key ----------------------------------------------------------


class Killed(BaseException):
    """The process dies here (nothing after it runs, nothing is cleaned up)."""


def keyed_create(tasks: TaskService, body: dict[str, Any], *, then_die: bool = False) -> Action:
    """The task endpoint's action: the key's answer is kept in the task's own transaction."""

    async def create(claim: Claim | None) -> tuple[int, str]:
        task = await tasks.create(body, "jupyter", claim)
        if then_die:
            raise Killed
        return 202, task.model_dump_json()

    return create


def task_ids(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return [row[0] for row in db.execute("SELECT id FROM tasks")]


async def test_a_process_killed_after_storing_a_task_leaves_its_key_answered(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "s.db")
    _, tasks = services(ScriptedEngine(deltas=("a",)), store)
    body = {"type": "response", "request": {"model": MODEL, "input": "x"}}
    first = IdempotencyKeys(IdempotencyRecords(store), "first")
    with pytest.raises(Killed):
        await first.once(
            "jupyter", "k", "print", keyed_create(tasks, body, then_die=True), wait_if_running=True
        )
    [created] = task_ids(store.path)
    restarted = IdempotencyKeys(IdempotencyRecords(store), "restarted")  # a new process
    retry = await restarted.once(
        "jupyter", "k", "print", keyed_create(tasks, body), wait_if_running=True
    )
    assert retry is not None and retry.replayed and retry.status == 202
    assert Task.model_validate_json(retry.body).id == created
    assert task_ids(store.path) == [created]  # not created twice
    await wait_final(tasks, created)


async def test_a_task_whose_key_cannot_be_recorded_is_not_created(tmp_path: Path) -> None:
    store = FaultyStore(tmp_path / "s.db")
    _, tasks = services(ScriptedEngine(deltas=("a",)), store)
    body = {"type": "response", "request": {"model": MODEL, "input": "x"}}
    keys = IdempotencyKeys(IdempotencyRecords(store), "keys")
    store.on = ("UPDATE IDEMPOTENCY",)
    store.fault = sqlite3.OperationalError("disk I/O error")
    with pytest.raises(sqlite3.OperationalError):
        await keys.once("jupyter", "k", "print", keyed_create(tasks, body), wait_if_running=True)
    store.fault = None
    assert task_ids(store.path) == []  # both or neither
    retry = await keys.once(
        "jupyter", "k", "print", keyed_create(tasks, body), wait_if_running=True
    )
    assert retry is not None and not retry.replayed
    assert task_ids(store.path) == [Task.model_validate_json(retry.body).id]
    await wait_final(tasks, task_ids(store.path)[0])
    assert integrity(store.path) == "ok"
