"""The stores: their tables, durable events, purge, on a SQLite file and on PostgreSQL; WAL,
SQLite's own."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from lmsp_jupyter.service.store import open_store
from lmsp_jupyter.service.store.interface import masked
from lmsp_jupyter.service.store.records import FinalState, ResponseRecords, StoredEvent, TaskRecords
from lmsp_jupyter.service.store.sqlite import SqliteStore
from tests.conftest import Stores

#: The process that runs the tasks of these tests.
HOLDER = "h"
#: A task of no request in particular: the keyword arguments of ``TaskRecords.insert``.
TASK: dict[str, Any] = dict(
    task_id="task_1",
    owner="o",
    holder=HOLDER,
    model="m",
    response_id="resp_1",
    request="{}",
    metadata={},
    at=1,
)


def test_a_new_store_has_its_tables_in_wal_mode(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "lmsp.sqlite3")
    tables = store.fetchall("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    assert [row["name"] for row in tables] == [
        "events",
        "idempotency",
        "leases",
        "responses",
        "tasks",
        "usage",
    ]
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_keeps_the_data(stores: Stores) -> None:
    url = stores.new()
    tasks = TaskRecords(stores.open(url))
    tasks.insert(**TASK)
    reopened = TaskRecords(stores.open(url))
    row = reopened.get("task_1")
    assert row is not None
    assert row["status"] == "queued"


def test_a_store_of_an_earlier_schema_is_refused_by_name_and_left_as_it_was(
    stores: Stores,
) -> None:
    url = stores.new()
    store = stores.open(url)
    TaskRecords(store).insert(**TASK)
    with store.transaction() as db:  # leases as they were before they knew their machine
        db.execute("ALTER TABLE leases DROP COLUMN machine")
    refusal = r"table leases has no column machine\); move it aside"
    for _ in range(2):  # the first refusal changed nothing: the second one is the same
        with pytest.raises(ValueError, match=refusal):
            open_store(url)
    assert TaskRecords(store).get("task_1") is not None


def test_an_appended_event_is_visible_to_another_connection_at_once(tmp_path: Path) -> None:
    path = tmp_path / "lmsp.sqlite3"
    tasks = TaskRecords(SqliteStore(path))
    tasks.insert(**TASK)
    tasks.append("task_1", HOLDER, StoredEvent(1, "response.created", "{}"))
    other = sqlite3.connect(path)
    assert other.execute("SELECT id, event FROM events").fetchall() == [(1, "response.created")]
    assert other.execute("SELECT last_event_id FROM tasks").fetchone() == (1,)


def test_the_final_event_and_the_tasks_end_are_one_write(stores: Stores) -> None:
    tasks = TaskRecords(stores.open(stores.new()))
    tasks.insert(**TASK)
    final = FinalState(status="completed", result="{}", error=None, at=5)
    tasks.append("task_1", HOLDER, StoredEvent(1, "response.completed", "{}"), final)
    row = tasks.get("task_1")
    assert row is not None
    assert (row["status"], row["completed_at"], row["last_event_id"]) == ("completed", 5, 1)


def test_purge_drops_events_first_then_tasks(stores: Stores) -> None:
    tasks = TaskRecords(stores.open(stores.new()))
    tasks.insert(**TASK)
    final = FinalState(status="completed", result="{}", error=None, at=10)
    tasks.append("task_1", HOLDER, StoredEvent(1, "response.completed", "{}"), final)
    assert tasks.purge(events_before=11, tasks_before=5) == (1, 0)
    row = tasks.get("task_1")
    assert row is not None
    assert row["events_expired"] == 1
    assert tasks.events_after("task_1", 0) == []
    assert tasks.purge(events_before=11, tasks_before=11) == (0, 1)
    assert tasks.get("task_1") is None


def test_newest_keeps_the_tasks_having_every_given_pair(stores: Stores) -> None:
    tasks = TaskRecords(stores.open(stores.new()))
    given = {
        "task_1": {"notebook": "a.ipynb", "cell": "c1"},
        "task_2": {"notebook": "a.ipynb", "cell": "c2"},
        "task_3": {"notebook": "b.ipynb", "cell": "c1"},
        "task_4": {},
    }
    for at, (task_id, metadata) in enumerate(given.items()):
        tasks.insert(
            task_id=task_id,
            owner="o",
            holder=HOLDER,
            model="m",
            response_id=f"resp_{at}",
            request="{}",
            metadata=metadata,
            at=at,
        )

    def ids(metadata: dict[str, str], owner: str = "o") -> list[str]:
        return [row["id"] for row in tasks.newest(owner, 10, None, metadata)]

    assert ids({}) == ["task_4", "task_3", "task_2", "task_1"]
    assert ids({"notebook": "a.ipynb"}) == ["task_2", "task_1"]
    assert ids({"notebook": "a.ipynb", "cell": "c1"}) == ["task_1"]
    assert ids({"cell": "c1"}) == ["task_3", "task_1"]
    assert ids({"notebook": "A.ipynb"}) == []  # exact, case included
    assert ids({"notebook": "a.ipynb", "kernel": "k"}) == []  # every given key must match
    assert ids({"notebook": "a.ipynb"}, owner="other") == []


def test_a_stored_response_is_saved_again_in_place_and_read_by_owner(stores: Stores) -> None:
    responses = ResponseRecords(stores.open(stores.new()))
    responses.save(response_id="resp_1", owner="o", at=1, context="[]", response='{"a":1}')
    responses.save(response_id="resp_1", owner="o", at=2, context="[]", response='{"a":2}')
    row = responses.get("resp_1", "o")
    assert row is not None and (row["created_at"], row["response"]) == (2, '{"a":2}')
    assert responses.get("resp_1", "other") is None
    assert [r["id"] for r in responses.with_item('{"a', "o")] == []  # a quoted id, not a prefix
    assert responses.purge(3) == 1


def test_a_store_url_opens_its_backend_and_the_log_never_shows_a_password() -> None:
    assert masked("postgresql://me:s3cret@db.example:5432/lmsp?sslmode=require") == (
        "postgresql://me:***@db.example:5432/lmsp?sslmode=require"
    )
    assert masked("postgresql://me@db/lmsp") == "postgresql://me@db/lmsp"
    with pytest.raises(ValueError, match="scheme"):
        open_store("mysql://db/lmsp")
    with pytest.raises(ValueError, match="sqlite:///"):
        open_store("sqlite://relative")


def test_concurrent_inserts_never_take_an_owner_past_its_limit(stores: Stores) -> None:
    """Counting an owner's unfinished tasks and inserting one are one step, whatever runs beside
    it: many processes' inserts at once (each its own store on one URL) keep to the limit."""
    url = stores.new()
    limit, tries = 3, 16
    records = [TaskRecords(stores.open(url)) for _ in range(4)]
    records[0].insert(**{**TASK, "task_id": "task_other", "owner": "other"})
    start = threading.Barrier(tries)

    def insert(number: int) -> bool:
        start.wait()
        task = {**TASK, "task_id": f"task_{number}", "response_id": f"resp_{number}"}
        return records[number % len(records)].insert(**task, max_unfinished=limit)

    with ThreadPoolExecutor(tries) as pool:
        inserted = list(pool.map(insert, range(tries)))
    assert inserted.count(True) == limit
    assert records[0].unfinished("o") == limit
    assert records[0].unfinished("other") == 1  # another owner's count is its own
    kept = [f"task_{number}" for number, done in enumerate(inserted) if done]
    assert all(records[0].get(task_id) is not None for task_id in kept)
    refused = [f"task_{number}" for number, done in enumerate(inserted) if not done]
    assert all(records[0].get(task_id) is None for task_id in refused)
    final = FinalState(status="completed", result="{}", error=None, at=5)
    records[0].append(kept[0], HOLDER, StoredEvent(1, "response.completed", "{}"), final)
    assert records[1].insert(**{**TASK, "task_id": "task_next"}, max_unfinished=limit)
    written: list[object] = []
    over = {**TASK, "task_id": "task_over", "then": written.append}
    assert not records[1].insert(**over, max_unfinished=limit)
    assert written == []  # nothing else of a refused insert's is written either
