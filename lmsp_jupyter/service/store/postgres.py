"""The PostgreSQL store: the same records as the SQLite file, in a database that several service
processes share, through psycopg 3 and a connection pool.

The first process to start creates the tables, under an advisory lock, so replicas starting
together create them once.
Connections are checked before use: a server restarted meanwhile costs no failed request once
it is back, and while it is down every use of the store fails at once with
``psycopg.OperationalError`` (``503 overloaded`` with ``Retry-After``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from .interface import Cursor, Dialect, Row, check_columns, masked

#: The tables, made when the database has none (an existing one has them already).
SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    holder TEXT,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    started_at BIGINT,
    completed_at BIGINT,
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
CREATE INDEX IF NOT EXISTS tasks_by_response ON tasks (response_id);
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
);
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    context TEXT NOT NULL,
    response TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency (
    owner TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    status INTEGER,
    body TEXT,
    holder TEXT,
    PRIMARY KEY (owner, key)
);
CREATE TABLE IF NOT EXISTS leases (
    holder TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    machine TEXT,
    process_start BIGINT
);
CREATE TABLE IF NOT EXISTS usage (
    owner TEXT PRIMARY KEY,
    responses INTEGER NOT NULL DEFAULT 0,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    updated_at BIGINT NOT NULL
);
"""

#: The advisory lock that one starting process holds while it creates the tables.
SCHEMA_LOCK = 0x4C4D5350  # "LMSP"
#: Seconds a use of the store waits for a connection before it fails (the server is down).
CONNECT_SECONDS = 2.0
#: Connections a process keeps open at most.
POOL_SIZE = 8


@cache
def _psycopg_sql(sql: str) -> str:
    """The records' ``?`` parameters as psycopg's ``%s``."""
    return sql.replace("%", "%%").replace("?", "%s")


class _Transaction:
    """A psycopg connection in a transaction, taking ``?`` parameters."""

    def __init__(self, connection: psycopg.Connection[dict[str, Any]]) -> None:
        self._connection = connection

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        return self._connection.execute(_psycopg_sql(sql), parameters)


class PostgresStore:
    """Durable state of the service in a PostgreSQL database (a :class:`.interface.Database`)."""

    dialect: Dialect = "postgresql"

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE) -> None:
        self.url = url
        self._pool: ConnectionPool[psycopg.Connection[dict[str, Any]]] = ConnectionPool(
            url,
            connection_class=psycopg.Connection[dict[str, Any]],
            kwargs={"autocommit": True, "row_factory": dict_row},
            min_size=1,
            max_size=pool_size,
            timeout=CONNECT_SECONDS,
            check=ConnectionPool.check_connection,
            open=False,
            name="lmsp-store",
        )
        self._pool.open(wait=True, timeout=CONNECT_SECONDS * 5)
        try:
            self._create_tables()
        except BaseException:
            self._pool.close()
            raise

    @contextmanager
    def transaction(self) -> Iterator[_Transaction]:
        """A write transaction, committed on success, rolled back whole on any failure."""
        with self._pool.connection() as connection, connection.transaction():
            yield _Transaction(connection)

    def fetchone(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        """The first row a read gives, if any."""
        with self._pool.connection() as connection:
            row: Row | None = connection.execute(_psycopg_sql(sql), parameters).fetchone()
            return row

    def fetchall(self, sql: str, parameters: Sequence[Any] = ()) -> list[Row]:
        """Every row a read gives."""
        with self._pool.connection() as connection:
            rows: list[Row] = list(connection.execute(_psycopg_sql(sql), parameters))
            return rows

    def _create_tables(self) -> None:
        with self.transaction() as db:
            db.execute("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK,))
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
        check_columns(SCHEMA, self._columns, self.describe())

    def _columns(self, table: str) -> set[str]:
        rows = self.fetchall(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        )
        return {row["column_name"] for row in rows}

    def describe(self) -> str:
        """The URL, its password masked."""
        return masked(self.url)

    def close(self) -> None:
        """Close every connection of the pool."""
        self._pool.close()
