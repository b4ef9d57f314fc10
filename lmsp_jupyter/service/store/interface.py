"""The store's interface: one database the record classes of :mod:`.records` write through
(:func:`.open_store` opens one from ``TaskStore.store_url``).

Two implementations: one SQLite file (:class:`.sqlite.SqliteStore`, a user's servers) and a
PostgreSQL database through a connection pool (:class:`.postgres.PostgresStore`, service
replicas of a shared deployment). Both take the records' SQL with ``?`` parameters; what
differs between them (locking, JSON) is asked of :attr:`Database.dialect`.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit, urlunsplit

from ...protocol.errors import LmspError

#: Seconds a client is told to wait before retrying when the store is busy or unreachable.
RETRY_AFTER_SECONDS = 5

Dialect = Literal["sqlite", "postgresql"]


class Row(Protocol):
    """A stored row, read by column name."""

    def __getitem__(self, key: str, /) -> Any: ...


class Cursor(Protocol):
    """What a statement gives back."""

    @property
    def rowcount(self) -> int:
        """Rows the statement changed."""

    def fetchone(self) -> Any:
        """The next row, or ``None``."""

    def fetchall(self) -> list[Any]:
        """The remaining rows."""


class Transaction(Protocol):
    """An open write transaction: statements with ``?`` parameters."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        """Run one statement in the transaction."""


class Database(Protocol):
    """Where the service's durable state lives (tasks, events, responses, keys, leases)."""

    dialect: Dialect

    def transaction(self) -> AbstractContextManager[Transaction]:
        """A write transaction, committed on success, rolled back whole on any failure."""

    def fetchone(self, sql: str, parameters: Sequence[Any] = ()) -> Row | None:
        """The first row a read gives, if any."""

    def fetchall(self, sql: str, parameters: Sequence[Any] = ()) -> list[Row]:
        """Every row a read gives."""

    def describe(self) -> str:
        """Where it is, for the log: a URL with no password."""

    def close(self) -> None:
        """Give its connections back."""


#: A table of a schema: its name, then the lines between its parentheses.
_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\)", re.DOTALL)
#: Lines of a table that declare no column.
_CONSTRAINTS = ("PRIMARY", "FOREIGN", "UNIQUE", "CHECK", "CONSTRAINT")


def check_columns(schema: str, columns: Callable[[str], set[str]], store: str) -> None:
    """Refuse a store whose tables lack a column ``schema`` declares (``columns`` gives a
    table's column names): a file or database written by an earlier lmsp-jupyter, which
    ``CREATE TABLE IF NOT EXISTS`` leaves as it was, would otherwise fail at its first use.

    :raises ValueError: naming the table, the missing columns and the store.
    """
    for table, body in _TABLE.findall(schema):
        declared = {
            line.split()[0]
            for line in body.splitlines()
            if line.strip() and not line.split()[0].startswith(_CONSTRAINTS)
        }
        missing = sorted(declared - columns(table))
        if missing:
            raise ValueError(
                f"the store {store} was written by an earlier version of lmsp-jupyter (table "
                f"{table} has no column {', '.join(missing)}); move it aside or name another "
                "store, and a new one is made"
            )


def masked(url: str) -> str:
    """``url`` with its password, if it has one, replaced by ``***`` (for logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def store_problem(exc: BaseException) -> LmspError | None:
    """The problem a failure of the store is (``None``: not one).

    A SQLite file locked by another writer, or a PostgreSQL server that cannot be reached, is
    temporary: ``overloaded`` with ``Retry-After``. A full, read-only or broken store is an
    ``internal_error``.
    """
    psycopg = sys.modules.get("psycopg")  # loaded only when a PostgreSQL store is used
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return _retry_later("the store is busy; retry later")
    if psycopg is not None and isinstance(exc, psycopg.OperationalError):
        return _retry_later("the store cannot be reached; retry later")
    if isinstance(exc, sqlite3.Error) or (psycopg is not None and isinstance(exc, psycopg.Error)):
        return LmspError("internal_error", "the store failed; see the server log")
    return None


def _retry_later(detail: str) -> LmspError:
    return LmspError("overloaded", detail, retry_after=RETRY_AFTER_SECONDS)
