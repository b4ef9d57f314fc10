"""The SQLite store: tasks, their events, stored responses and idempotency keys.

One connection per thread that uses it; WAL lets the background purge run beside the
requests. Each event is committed before anyone is sent it, so a killed process loses none
that a client saw.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..protocol.errors import LmspError
from ..protocol.events import FINAL_EVENTS, ResponseEvent

#: Each entry moves the schema one version up; the store applies the ones it has not yet.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        model TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        started_at INTEGER,
        completed_at INTEGER,
        response_id TEXT NOT NULL,
        request TEXT NOT NULL,
        result TEXT,
        error TEXT,
        last_event_id INTEGER NOT NULL DEFAULT 0,
        events_expired INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX tasks_by_owner ON tasks (owner, created_at DESC, id DESC);
    CREATE TABLE events (
        task_id TEXT NOT NULL,
        id INTEGER NOT NULL,
        event TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (task_id, id)
    ) WITHOUT ROWID;
    CREATE TABLE responses (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        context TEXT NOT NULL,
        response TEXT NOT NULL
    );
    CREATE TABLE idempotency (
        owner TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        status INTEGER,
        body TEXT,
        PRIMARY KEY (owner, key)
    );
    """,
    # The request's metadata beside the task, so tasks can be listed by it (LMSP 1.0 section 7).
    """
    ALTER TABLE tasks ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
    UPDATE tasks SET metadata = json_extract(request, '$.metadata')
        WHERE json_type(request, '$.metadata') = 'object';
    """,
]


#: How long a write waits for another writer (it blocks the event loop meanwhile).
BUSY_TIMEOUT_SECONDS = 5.0
RETRY_AFTER_SECONDS = 5


def store_problem(exc: BaseException) -> LmspError | None:
    """The problem a failure of the store is (``None``: not one): a database locked by another
    writer is temporary (``overloaded``, retry later); a full, read-only or broken file is an
    ``internal_error``."""
    if not isinstance(exc, sqlite3.Error):
        return None
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return LmspError(
            "overloaded",
            "the store is busy; retry later",
            retry_after=RETRY_AFTER_SECONDS,
        )
    return LmspError("internal_error", "the store failed; see the server log")


@dataclass(frozen=True)
class StoredEvent:
    """An event as stored: its sequence number, name and JSON data."""

    id: int
    event: str
    data: str

    @property
    def is_final(self) -> bool:
        """Whether this event ends its stream."""
        return self.event in FINAL_EVENTS

    @classmethod
    def of(cls, event: ResponseEvent) -> StoredEvent:
        """``event`` as it is stored."""
        return cls(event.id, event.event, event.data_json())


class Store:
    """Durable state of the service in one SQLite file."""

    def __init__(self, path: Path, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._migrate()

    @property
    def db(self) -> sqlite3.Connection:
        """This thread's connection."""
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, isolation_level=None, timeout=self.busy_timeout)
            connection.row_factory = sqlite3.Row
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("PRAGMA foreign_keys=ON")
            self._local.connection = connection
        return connection

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, committed on success, rolled back whole on any failure."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")  # a full disk may refuse the commit itself
        except BaseException:
            try:
                if db.in_transaction:
                    db.execute("ROLLBACK")
            except sqlite3.Error:
                self.close()  # a connection that cannot roll back is dropped, not reused
            raise

    def _migrate(self) -> None:
        with self.transaction() as db:
            version: int = db.execute("PRAGMA user_version").fetchone()[0]
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in script.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")

    @property
    def schema_version(self) -> int:
        """The schema version of the file."""
        version: int = self.db.execute("PRAGMA user_version").fetchone()[0]
        return version

    def close(self) -> None:
        """Close this thread's connection."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None


def dumps(value: Any) -> str:
    """Compact JSON for storage."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def now() -> int:
    """Seconds since the epoch, as stored."""
    return int(time.time())


class TaskRecords:
    """The SQL of tasks and their events."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def insert(
        self,
        *,
        task_id: str,
        owner: str,
        model: str,
        response_id: str,
        request: str,
        metadata: dict[str, str],
        at: int,
        then: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        """A new queued task; ``then`` writes more in the same transaction."""
        with self.store.transaction() as db:
            db.execute(
                "INSERT INTO tasks"
                " (id, owner, model, status, created_at, response_id, request, metadata)"
                " VALUES (?, ?, ?, 'queued', ?, ?, ?, ?)",
                (task_id, owner, model, at, response_id, request, dumps(metadata)),
            )
            if then is not None:
                then(db)

    def get(self, task_id: str) -> sqlite3.Row | None:
        """One task's row."""
        row: sqlite3.Row | None = self.store.db.execute(
            "SELECT * FROM tasks WHERE id = ?", (task_id,)
        ).fetchone()
        return row

    def of_response(self, response_id: str) -> sqlite3.Row | None:
        """The task that runs the response ``response_id``."""
        row: sqlite3.Row | None = self.store.db.execute(
            "SELECT * FROM tasks WHERE response_id = ?", (response_id,)
        ).fetchone()
        return row

    def newest(
        self, owner: str, limit: int, status: str | None, metadata: dict[str, str]
    ) -> list[sqlite3.Row]:
        """An owner's tasks, newest first; with ``metadata``, those having every pair of it."""
        query = "SELECT * FROM tasks WHERE owner = ?"
        args: list[Any] = [owner]
        if status is not None:
            query += " AND status = ?"
            args.append(status)
        for key, value in metadata.items():
            query += (
                " AND EXISTS (SELECT 1 FROM json_each(tasks.metadata)"
                " WHERE json_each.key = ? AND json_each.value = ? AND json_each.type = 'text')"
            )
            args += [key, value]
        query += " ORDER BY created_at DESC, id DESC LIMIT ?"
        return self.store.db.execute(query, (*args, limit)).fetchall()

    def started(self, task_id: str, at: int) -> None:
        """The task left the queue."""
        with self.store.transaction() as db:
            db.execute(
                "UPDATE tasks SET status = 'in_progress', started_at = ? WHERE id = ?",
                (at, task_id),
            )

    def append(self, task_id: str, event: StoredEvent, final: FinalState | None = None) -> None:
        """Store one event (and, with the final one, the task's end) in one transaction."""
        with self.store.transaction() as db:
            db.execute(
                "INSERT INTO events (task_id, id, event, data) VALUES (?, ?, ?, ?)",
                (task_id, event.id, event.event, event.data),
            )
            db.execute("UPDATE tasks SET last_event_id = ? WHERE id = ?", (event.id, task_id))
            if final is not None:
                db.execute(
                    "UPDATE tasks SET status = ?, result = ?, error = ?, completed_at = ?"
                    " WHERE id = ?",
                    (final.status, final.result, final.error, final.at, task_id),
                )

    def events_after(self, task_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        """Stored events with ids greater than ``after``, in order."""
        rows = self.store.db.execute(
            "SELECT id, event, data FROM events WHERE task_id = ? AND id > ? ORDER BY id LIMIT ?",
            (task_id, after, limit),
        ).fetchall()
        return [StoredEvent(row["id"], row["event"], row["data"]) for row in rows]

    def unfinished(self) -> list[sqlite3.Row]:
        """Tasks that were queued or running when the service stopped."""
        return self.store.db.execute(
            "SELECT * FROM tasks WHERE status IN ('queued', 'in_progress') ORDER BY created_at"
        ).fetchall()

    def purge(self, *, events_before: int, tasks_before: int) -> tuple[int, int]:
        """Drop events of tasks that ended before one time and tasks that ended before another."""
        with self.store.transaction() as db:
            expired = db.execute(
                "SELECT id FROM tasks WHERE completed_at < ? AND events_expired = 0",
                (events_before,),
            ).fetchall()
            for row in expired:
                db.execute("DELETE FROM events WHERE task_id = ?", (row["id"],))
            db.execute(
                "UPDATE tasks SET events_expired = 1 WHERE completed_at < ? AND events_expired = 0",
                (events_before,),
            )
            gone = db.execute(
                "DELETE FROM tasks WHERE completed_at < ? RETURNING id", (tasks_before,)
            ).fetchall()
            for row in gone:
                db.execute("DELETE FROM events WHERE task_id = ?", (row["id"],))
        return len(expired), len(gone)


@dataclass(frozen=True)
class FinalState:
    """How a task ended: stored with its final event."""

    status: str
    result: str | None
    error: str | None
    at: int


class ResponseRecords:
    """The SQL of stored responses (``store: true``)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def save(self, *, response_id: str, owner: str, at: int, context: str, response: str) -> None:
        """Keep a response with the input items it answered."""
        with self.store.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO responses (id, owner, created_at, context, response)"
                " VALUES (?, ?, ?, ?, ?)",
                (response_id, owner, at, context, response),
            )

    def get(self, response_id: str, owner: str) -> sqlite3.Row | None:
        """A stored response of ``owner``."""
        row: sqlite3.Row | None = self.store.db.execute(
            "SELECT * FROM responses WHERE id = ? AND owner = ?", (response_id, owner)
        ).fetchone()
        return row

    def with_item(self, item_id: str, owner: str) -> list[sqlite3.Row]:
        """``owner``'s stored responses whose text mentions ``item_id`` (the caller checks)."""
        pattern = "%" + json.dumps(item_id).replace("%", "") + "%"
        return self.store.db.execute(
            "SELECT * FROM responses WHERE owner = ? AND (response LIKE ? OR context LIKE ?)",
            (owner, pattern, pattern),
        ).fetchall()

    def purge(self, before: int) -> int:
        """Drop responses stored before ``before``."""
        with self.store.transaction() as db:
            return db.execute("DELETE FROM responses WHERE created_at < ?", (before,)).rowcount


class IdempotencyRecords:
    """The SQL of idempotency keys."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, owner: str, key: str) -> sqlite3.Row | None:
        """The record of a key, if any."""
        row: sqlite3.Row | None = self.store.db.execute(
            "SELECT * FROM idempotency WHERE owner = ? AND key = ?", (owner, key)
        ).fetchone()
        return row

    def begin(self, owner: str, key: str, fingerprint: str, at: int) -> None:
        """Claim a key for a request now running."""
        with self.store.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO idempotency (owner, key, fingerprint, created_at)"
                " VALUES (?, ?, ?, ?)",
                (owner, key, fingerprint, at),
            )

    def complete(self, owner: str, key: str, status: int, body: str) -> None:
        """Record the answer given under a key."""
        with self.store.transaction() as db:
            self.complete_in(db, owner, key, status, body)

    @staticmethod
    def complete_in(db: sqlite3.Connection, owner: str, key: str, status: int, body: str) -> None:
        """Record the answer given under a key, in ``db``'s open transaction."""
        db.execute(
            "UPDATE idempotency SET status = ?, body = ? WHERE owner = ? AND key = ?",
            (status, body, owner, key),
        )

    def forget(self, owner: str, key: str) -> None:
        """Release a key (the first attempt failed on the server's side)."""
        with self.store.transaction() as db:
            db.execute("DELETE FROM idempotency WHERE owner = ? AND key = ?", (owner, key))

    def purge(self, before: int) -> int:
        """Drop keys older than ``before``."""
        with self.store.transaction() as db:
            return db.execute("DELETE FROM idempotency WHERE created_at < ?", (before,)).rowcount
