"""The store's records (tasks, their events, stored responses, idempotency keys, leases): the SQL
the service writes through any :class:`.interface.Database`, a SQLite file (:mod:`.sqlite`) or
a PostgreSQL database (:mod:`.postgres`).

Each event is committed before anyone is sent it, so a killed process loses none that a client
saw.

Each serving process holds a lease in the store that it renews while it lives; the tasks it runs
and the idempotency keys it has in flight name it as their holder. What a process whose lease
has lapsed, or was dropped, held is ended by whichever process finds it
(:meth:`LeaseRecords.end_gone`); every rule of who is alive is in :class:`LeaseRecords` and
:func:`_gone`, and the one that drops the lease of a gone process of this machine at once in
:mod:`.leases`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...protocol.events import FINAL_EVENTS, ResponseEvent
from .interface import Database, Dialect, Row, Transaction

#: The statuses of a task that has not ended.
UNFINISHED = "status IN ('queued', 'in_progress')"


class TaskLost(Exception):
    """A write to a task that is no longer this process's to write: it has ended, failed by
    another server that found this one's lease lapsed (the process was paused or stalled)."""


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


def dumps(value: Any) -> str:
    """Compact JSON for storage."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def now() -> int:
    """Seconds since the epoch, as stored."""
    return int(time.time())


_TASK_COLUMNS = "id, owner, holder, model, status, created_at, response_id, request, metadata"
_TASK_VALUES = "?, ?, ?, ?, 'queued', ?, ?, ?, ?"
#: The first key of PostgreSQL's advisory lock on an owner's new tasks (the second: the owner's
#: hash), apart from every other lock of the database's.
OWNER_LOCK = 0x4C4D534F  # "LMSO"


class TaskRecords:
    """The SQL of tasks and their events."""

    def __init__(self, store: Database) -> None:
        self.store = store

    def insert(
        self,
        *,
        task_id: str,
        owner: str,
        holder: str,
        model: str,
        response_id: str,
        request: str,
        metadata: dict[str, str],
        at: int,
        then: Callable[[Transaction], None] | None = None,
        max_unfinished: int = 0,
    ) -> bool:
        """A new queued task run by the process ``holder``; ``then`` writes more in the same
        transaction. With ``max_unfinished``, only while ``owner`` has fewer tasks queued or
        running, counted and inserted in one transaction that no other insert of the owner's
        runs beside (SQLite: one writer at a time; PostgreSQL: a lock on the owner), on any
        process sharing the store; ``False``: not inserted, nothing written."""
        values = (task_id, owner, holder, model, at, response_id, request, dumps(metadata))
        with self.store.transaction() as db:
            if max_unfinished:
                if self.store.dialect == "postgresql":
                    db.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))", (OWNER_LOCK, owner))
                inserted = db.execute(
                    f"INSERT INTO tasks ({_TASK_COLUMNS}) SELECT {_TASK_VALUES}"
                    f" WHERE (SELECT count(*) FROM tasks WHERE owner = ? AND {UNFINISHED}) < ?",
                    (*values, owner, max_unfinished),
                ).rowcount
                if not inserted:
                    return False
            else:
                db.execute(f"INSERT INTO tasks ({_TASK_COLUMNS}) VALUES ({_TASK_VALUES})", values)
            if then is not None:
                then(db)
        return True

    def get(self, task_id: str) -> Row | None:
        """One task's row."""
        return self.store.fetchone("SELECT * FROM tasks WHERE id = ?", (task_id,))

    def of_response(self, response_id: str) -> Row | None:
        """The task that runs the response ``response_id``."""
        return self.store.fetchone("SELECT * FROM tasks WHERE response_id = ?", (response_id,))

    def owner(self, task_id: str) -> str | None:
        """The owner of a task; ``None``: there is none."""
        row = self.store.fetchone("SELECT owner FROM tasks WHERE id = ?", (task_id,))
        return None if row is None else str(row["owner"])

    def unfinished(self, owner: str) -> int:
        """How many of ``owner``'s tasks are queued or running."""
        row = self.store.fetchone(
            f"SELECT count(*) AS unfinished FROM tasks WHERE owner = ? AND {UNFINISHED}", (owner,)
        )
        return 0 if row is None else int(row["unfinished"])

    def newest(
        self, owner: str, limit: int, status: str | None, metadata: dict[str, str]
    ) -> list[Row]:
        """An owner's tasks, newest first; with ``metadata``, those having every pair of it."""
        query = "SELECT * FROM tasks WHERE owner = ?"
        args: list[Any] = [owner]
        if status is not None:
            query += " AND status = ?"
            args.append(status)
        has_pair = _HAS_PAIR[self.store.dialect]
        for key, value in metadata.items():
            query += f" AND {has_pair}"
            args += [key, value]
        query += " ORDER BY created_at DESC, id DESC LIMIT ?"
        return self.store.fetchall(query, (*args, limit))

    def started(self, task_id: str, holder: str, at: int) -> bool:
        """The task left the queue; returns whether a cancel of it was asked meanwhile;
        :class:`TaskLost` if it is no longer ``holder``'s."""
        with self.store.transaction() as db:
            row = db.execute(
                "UPDATE tasks SET status = 'in_progress', started_at = ?"
                " WHERE id = ? AND holder = ? AND status = 'queued' RETURNING cancel_requested",
                (at, task_id, holder),
            ).fetchone()
            if row is None:
                raise TaskLost(task_id)
            return bool(row["cancel_requested"])

    def append(
        self, task_id: str, holder: str, event: StoredEvent, final: FinalState | None = None
    ) -> bool:
        """Store one event (and, with the final one, the task's end) in one transaction;
        returns whether a cancel of the task was asked (by any server sharing the store);
        :class:`TaskLost` if the task is no longer ``holder``'s to write (it has ended)."""
        with self.store.transaction() as db:
            held = db.execute(
                "SELECT cancel_requested FROM tasks"
                f" WHERE id = ? AND holder = ? AND {UNFINISHED}{_LOCKED[self.store.dialect]}",
                (task_id, holder),
            ).fetchone()
            if held is None:
                raise TaskLost(task_id)
            self.write_in(db, task_id, event, final)
            return bool(held["cancel_requested"])

    def request_cancel(self, task_id: str) -> bool:
        """Ask whichever server runs an unfinished task to cancel it; ``False``: it has ended."""
        with self.store.transaction() as db:
            return (
                db.execute(
                    f"UPDATE tasks SET cancel_requested = 1 WHERE id = ? AND {UNFINISHED}",
                    (task_id,),
                ).rowcount
                == 1
            )

    def cancels_requested(self, holder: str) -> list[str]:
        """The unfinished tasks of ``holder`` that another server was asked to cancel."""
        rows = self.store.fetchall(
            f"SELECT id FROM tasks WHERE holder = ? AND {UNFINISHED} AND cancel_requested = 1",
            (holder,),
        )
        return [row["id"] for row in rows]

    @staticmethod
    def write_in(
        db: Transaction, task_id: str, event: StoredEvent, final: FinalState | None
    ) -> None:
        """Store one event (and the task's end) in ``db``'s open transaction."""
        db.execute(
            "INSERT INTO events (task_id, id, event, data) VALUES (?, ?, ?, ?)",
            (task_id, event.id, event.event, event.data),
        )
        db.execute("UPDATE tasks SET last_event_id = ? WHERE id = ?", (event.id, task_id))
        if final is not None:
            db.execute(
                "UPDATE tasks SET status = ?, result = ?, error = ?, completed_at = ? WHERE id = ?",
                (final.status, final.result, final.error, final.at, task_id),
            )

    def events_after(self, task_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        """Stored events with ids greater than ``after``, in order."""
        rows = self.store.fetchall(
            "SELECT id, event, data FROM events WHERE task_id = ? AND id > ? ORDER BY id LIMIT ?",
            (task_id, after, limit),
        )
        return [StoredEvent(row["id"], row["event"], row["data"]) for row in rows]

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

    def __init__(self, store: Database) -> None:
        self.store = store

    def save(self, *, response_id: str, owner: str, at: int, context: str, response: str) -> None:
        """Keep a response with the input items it answered."""
        with self.store.transaction() as db:
            db.execute(
                "INSERT INTO responses (id, owner, created_at, context, response)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET owner = excluded.owner,"
                " created_at = excluded.created_at, context = excluded.context,"
                " response = excluded.response",
                (response_id, owner, at, context, response),
            )

    def get(self, response_id: str, owner: str) -> Row | None:
        """A stored response of ``owner``."""
        return self.store.fetchone(
            "SELECT * FROM responses WHERE id = ? AND owner = ?", (response_id, owner)
        )

    def owner(self, response_id: str) -> str | None:
        """The owner of a stored response or of the task answering with it; ``None``: neither."""
        row = self.store.fetchone(
            "SELECT owner FROM responses WHERE id = ?"
            " UNION ALL SELECT owner FROM tasks WHERE response_id = ? LIMIT 1",
            (response_id, response_id),
        )
        return None if row is None else str(row["owner"])

    def with_item(self, item_id: str, owner: str) -> list[Row]:
        """``owner``'s stored responses whose text mentions ``item_id`` (the caller checks)."""
        pattern = "%" + json.dumps(item_id).replace("%", "") + "%"
        return self.store.fetchall(
            "SELECT * FROM responses WHERE owner = ? AND (response LIKE ? OR context LIKE ?)",
            (owner, pattern, pattern),
        )

    def purge(self, before: int) -> int:
        """Drop responses stored before ``before``."""
        with self.store.transaction() as db:
            return db.execute("DELETE FROM responses WHERE created_at < ?", (before,)).rowcount


class UsageRecords:
    """The SQL of each owner's token usage, added up over its responses."""

    def __init__(self, store: Database) -> None:
        self.store = store

    def add(self, owner: str, input_tokens: int, output_tokens: int) -> None:
        """Count one more response of ``owner`` and the tokens it used."""
        with self.store.transaction() as db:
            db.execute(
                "INSERT INTO usage (owner, responses, input_tokens, output_tokens, updated_at)"
                " VALUES (?, 1, ?, ?, ?) ON CONFLICT (owner) DO UPDATE SET"
                " responses = usage.responses + 1,"
                " input_tokens = usage.input_tokens + excluded.input_tokens,"
                " output_tokens = usage.output_tokens + excluded.output_tokens,"
                " updated_at = excluded.updated_at",
                (owner, input_tokens, output_tokens, now()),
            )

    def of(self, owner: str | None) -> list[Row]:
        """The usage of ``owner`` (``None``: of every owner), by owner."""
        if owner is None:
            return self.store.fetchall("SELECT * FROM usage ORDER BY owner")
        return self.store.fetchall("SELECT * FROM usage WHERE owner = ?", (owner,))


class IdempotencyRecords:
    """The SQL of idempotency keys."""

    def __init__(self, store: Database) -> None:
        self.store = store

    def get(self, owner: str, key: str) -> Row | None:
        """The record of a key, if any."""
        return self.store.fetchone(
            "SELECT * FROM idempotency WHERE owner = ? AND key = ?", (owner, key)
        )

    def claim(
        self, owner: str, key: str, fingerprint: str, holder: str, at: int, expired_before: int
    ) -> bool:
        """Claim a key for a request that ``holder`` runs now; ``False``: it is taken.

        A key is free when it has no record, when its record is older than
        ``expired_before``, or when its first attempt has no answer and is no one's any more:
        its process's lease has lapsed, or it was ``holder``'s own (the caller claims only keys
        it is not running). The check and the claim are one write, so two servers never
        both claim one key.
        """
        with self.store.transaction() as db:
            return (
                db.execute(
                    "INSERT INTO idempotency (owner, key, fingerprint, created_at, holder)"
                    " VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (owner, key) DO UPDATE SET fingerprint = excluded.fingerprint,"
                    " created_at = excluded.created_at, holder = excluded.holder,"
                    " status = NULL, body = NULL"
                    " WHERE idempotency.created_at < ? OR (idempotency.status IS NULL AND"
                    f" (idempotency.holder = excluded.holder OR {_gone('idempotency.holder')}))",
                    (owner, key, fingerprint, at, holder, expired_before, time.time()),
                ).rowcount
                == 1
            )

    def complete(self, owner: str, key: str, status: int, body: str) -> None:
        """Record the answer given under a key."""
        with self.store.transaction() as db:
            self.complete_in(db, owner, key, status, body)

    @staticmethod
    def complete_in(db: Transaction, owner: str, key: str, status: int, body: str) -> None:
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


#: SQL true when a task's metadata has the pair bound to its two ``?`` (key, then value).
_HAS_PAIR: dict[Dialect, str] = {
    "sqlite": "EXISTS (SELECT 1 FROM json_each(tasks.metadata) WHERE json_each.key = ?"
    " AND json_each.value = ? AND json_each.type = 'text')",
    "postgresql": "tasks.metadata::jsonb @> jsonb_build_object(?::text, ?::text)",
}
#: What a read of task rows about to be written ends with: PostgreSQL locks them (a
#: concurrent writer waits, then sees them as written); SQLite's writers take turns anyway.
_LOCKED: dict[Dialect, str] = {"sqlite": "", "postgresql": " FOR UPDATE"}


def _gone(column: str) -> str:
    """SQL that is true when the process ``column`` names holds no lease at the time bound to
    its one ``?`` (seconds since the epoch): it stopped, or stopped renewing."""
    return (
        "NOT EXISTS (SELECT 1 FROM leases"
        f" WHERE leases.holder = {column} AND leases.expires_at > ?)"
    )


class LeaseRecords:
    """The SQL of leases: which serving processes are alive, and what the gone ones leave.

    A process holds a lease from its start, renews it well before it expires, and releases it
    when it stops cleanly. Times are seconds since the epoch of the machine (servers sharing a
    file share its clock).
    """

    def __init__(self, store: Database) -> None:
        self.store = store

    def hold(
        self,
        holder: str,
        *,
        host: str,
        pid: int,
        started_at: float,
        at: float,
        until: float,
        machine: str | None = None,
        process_start: int | None = None,
    ) -> bool:
        """Hold ``holder``'s lease until ``until``; ``False``: it was not held at ``at`` (new,
        or lapsed: the work it held may have been ended by another process meanwhile). With
        ``machine``, the process is ``pid`` there, started at ``process_start``."""
        with self.store.transaction() as db:
            renewed = db.execute(
                "UPDATE leases SET expires_at = ? WHERE holder = ? AND expires_at > ?",
                (until, holder, at),
            ).rowcount
            if renewed:
                return True
            db.execute(
                "INSERT INTO leases"
                " (holder, host, pid, started_at, expires_at, machine, process_start)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (holder) DO UPDATE SET"
                " host = excluded.host, pid = excluded.pid, started_at = excluded.started_at,"
                " expires_at = excluded.expires_at, machine = excluded.machine,"
                " process_start = excluded.process_start",
                (holder, host, pid, started_at, until, machine, process_start),
            )
            return False

    def of_machine(self, machine: str) -> list[Row]:
        """The leases of processes on ``machine``: their holder, pid and process start."""
        return self.store.fetchall(
            "SELECT holder, pid, process_start FROM leases"
            " WHERE machine = ? AND process_start IS NOT NULL",
            (machine,),
        )

    def release(self, holder: str) -> None:
        """Give the lease up (a clean stop): what ``holder`` still holds is gone's now."""
        with self.store.transaction() as db:
            db.execute("DELETE FROM leases WHERE holder = ?", (holder,))

    def end_gone(self, at: float, ending: Callable[[Row], tuple[StoredEvent, FinalState]]) -> int:
        """End what processes gone at ``at`` held, in one write: each unfinished task gets the
        final event ``ending`` makes of its row, keys in flight are freed, lapsed leases
        dropped. Returns how many tasks were ended."""
        with self.store.transaction() as db:
            rows = db.execute(
                f"SELECT * FROM tasks WHERE {UNFINISHED} AND {_gone('tasks.holder')}"
                f" ORDER BY created_at{_LOCKED[self.store.dialect]}",
                (at,),
            ).fetchall()
            for row in rows:
                TaskRecords.write_in(db, row["id"], *ending(row))
            db.execute(
                f"DELETE FROM idempotency WHERE status IS NULL AND {_gone('idempotency.holder')}",
                (at,),
            )
            db.execute("DELETE FROM leases WHERE expires_at <= ?", (at,))
        return len(rows)
