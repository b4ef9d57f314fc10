"""The SQLite store: the service's records in one file.

It has one connection per thread that uses it; WAL lets the background purge run beside the
requests, and several servers of one user share one file (every write waits its turn, up to the
busy timeout).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .interface import Dialect, Row, check_columns

#: The tables, made when the file is new (an existing file has them already).
SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    holder TEXT,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    completed_at INTEGER,
    response_id TEXT NOT NULL,
    request TEXT NOT NULL,
    result TEXT,
    error TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    last_event_id INTEGER NOT NULL DEFAULT 0,
    events_expired INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS tasks_by_owner ON tasks (owner, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS unfinished_tasks ON tasks (holder)
    WHERE status IN ('queued', 'in_progress');
CREATE INDEX IF NOT EXISTS unfinished_tasks_by_owner ON tasks (owner)
    WHERE status IN ('queued', 'in_progress');
CREATE TABLE IF NOT EXISTS events (
    task_id TEXT NOT NULL,
    id INTEGER NOT NULL,
    event TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (task_id, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    context TEXT NOT NULL,
    response TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency (
    owner TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    status INTEGER,
    body TEXT,
    holder TEXT,
    PRIMARY KEY (owner, key)
);
CREATE TABLE IF NOT EXISTS leases (
    holder TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    machine TEXT,
    process_start INTEGER
);
CREATE TABLE IF NOT EXISTS usage (
    owner TEXT PRIMARY KEY,
    responses INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL
);
"""


#: How long a write waits for another writer (it blocks the event loop meanwhile).
BUSY_TIMEOUT_SECONDS = 5.0


class SqliteStore:
    """Durable state of the service in one SQLite file (a :class:`.interface.Database`)."""

    dialect: Dialect = "sqlite"

    def __init__(self, path: Path, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        try:
            self._create_tables()
        except BaseException:
            self.close()
            raise

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

    def fetchone(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        """The first row a read gives, if any."""
        row: Row | None = self.db.execute(sql, parameters).fetchone()
        return row

    def fetchall(self, sql: str, parameters: Sequence[Any] = ()) -> list[Row]:
        """Every row a read gives."""
        return self.db.execute(sql, parameters).fetchall()

    def describe(self) -> str:
        """The file, as a URL."""
        return f"sqlite:///{self.path}"

    def _create_tables(self) -> None:
        with self.transaction() as db:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
        check_columns(SCHEMA, self._columns, self.describe())

    def _columns(self, table: str) -> set[str]:
        return {row["name"] for row in self.fetchall(f"PRAGMA table_info({table})")}

    def close(self) -> None:
        """Close this thread's connection."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None
