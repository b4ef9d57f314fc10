"""The SQLite store: schema versions, WAL, durable events, purge."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from lmsp_jupyter.service.store import (
    MIGRATIONS,
    FinalState,
    Store,
    StoredEvent,
    TaskRecords,
)


def test_a_new_store_is_at_the_latest_schema_version_in_wal_mode(tmp_path: Path) -> None:
    store = Store(tmp_path / "lmsp.sqlite3")
    assert store.schema_version == len(MIGRATIONS)
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_keeps_the_data_and_runs_no_migration_twice(tmp_path: Path) -> None:
    path = tmp_path / "lmsp.sqlite3"
    tasks = TaskRecords(Store(path))
    tasks.insert(task_id="task_1", owner="o", model="m", response_id="resp_1", request="{}", at=1)
    reopened = TaskRecords(Store(path))
    assert reopened.store.schema_version == len(MIGRATIONS)
    row = reopened.get("task_1")
    assert row is not None
    assert row["status"] == "queued"


def test_an_older_file_is_migrated_forward(tmp_path: Path) -> None:
    path = tmp_path / "lmsp.sqlite3"
    sqlite3.connect(path).close()  # an empty file at version 0
    assert Store(path).schema_version == len(MIGRATIONS)


def test_an_appended_event_is_visible_to_another_connection_at_once(tmp_path: Path) -> None:
    path = tmp_path / "lmsp.sqlite3"
    tasks = TaskRecords(Store(path))
    tasks.insert(task_id="task_1", owner="o", model="m", response_id="resp_1", request="{}", at=1)
    tasks.append("task_1", StoredEvent(1, "response.created", "{}"))
    other = sqlite3.connect(path)
    assert other.execute("SELECT id, event FROM events").fetchall() == [(1, "response.created")]
    assert other.execute("SELECT last_event_id FROM tasks").fetchone() == (1,)


def test_the_final_event_and_the_tasks_end_are_one_write(tmp_path: Path) -> None:
    tasks = TaskRecords(Store(tmp_path / "lmsp.sqlite3"))
    tasks.insert(task_id="task_1", owner="o", model="m", response_id="resp_1", request="{}", at=1)
    final = FinalState(status="completed", result="{}", error=None, at=5)
    tasks.append("task_1", StoredEvent(1, "response.completed", "{}"), final)
    row = tasks.get("task_1")
    assert row is not None
    assert (row["status"], row["completed_at"], row["last_event_id"]) == ("completed", 5, 1)


def test_purge_drops_events_first_then_tasks(tmp_path: Path) -> None:
    tasks = TaskRecords(Store(tmp_path / "lmsp.sqlite3"))
    tasks.insert(task_id="task_1", owner="o", model="m", response_id="resp_1", request="{}", at=1)
    final = FinalState(status="completed", result="{}", error=None, at=10)
    tasks.append("task_1", StoredEvent(1, "response.completed", "{}"), final)
    assert tasks.purge(events_before=11, tasks_before=5) == (1, 0)
    row = tasks.get("task_1")
    assert row is not None
    assert row["events_expired"] == 1
    assert tasks.events_after("task_1", 0) == []
    assert tasks.purge(events_before=11, tasks_before=11) == (0, 1)
    assert tasks.get("task_1") is None
