"""The store and the task service over it: where tasks, events, stored responses and
idempotency keys are kept, this server's lease on what it runs, and how long what has ended
stays. Its settings are its own (``TaskStore.store_url``, ...)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from tornado.ioloop import PeriodicCallback
from traitlets import Float, Int, TraitError, Unicode, default
from traitlets.config import LoggingConfigurable

from ..service.idempotency import IdempotencyKeys
from ..service.leases import LEASE_SECONDS, RENEW_SECONDS, Lease
from ..service.limits import OwnerLimits
from ..service.responses import ResponseService
from ..service.store import open_store
from ..service.store.interface import Database
from ..service.store.records import IdempotencyRecords, LeaseRecords, TaskRecords, now
from ..service.tasks import FOLLOW_POLL_SECONDS, TaskService


class TaskStore(LoggingConfigurable):
    """Opens the store, holds this server's lease, runs the task service and purges what has
    expired; ``LmspApp`` builds it as ``TaskStore(parent=app)``."""

    store_path = Unicode(
        help="The SQLite file of tasks, events, stored responses and idempotency keys, when "
        "store_url is not set. Default: lmsp/lmsp.sqlite3 in the Jupyter data directory, "
        "shared by all of a user's Jupyter servers (see lease_seconds).",
    ).tag(config=True)

    store_url = Unicode(
        help="Where tasks, events, stored responses and idempotency keys are kept: "
        "sqlite:///relative/file or sqlite:////absolute/file (default: store_path), or "
        "postgresql://user@host:port/dbname for service replicas sharing one PostgreSQL "
        "database (pip install 'lmsp-jupyter[postgresql]'). A password is best left to "
        "libpq's environment (PGPASSWORD) or ~/.pgpass; the log shows the URL masked. "
        "See docs/postgresql.md.",
    ).tag(config=True)

    follow_poll_seconds = Float(
        FOLLOW_POLL_SECONDS,
        help="How often a follower of a task that another server sharing the store runs "
        "looks for its new events (the delay it adds to each).",
    ).tag(config=True)

    lease_seconds = Float(
        LEASE_SECONDS,
        help="How long this server's lease on the tasks it runs lasts unrenewed. Servers that "
        "share a store (all of a user's, by default) each hold one; a server fails another's "
        "queued and running tasks with service_restarted, and frees its idempotency keys in "
        "flight, once that server's lease has lapsed: it was killed or hung this long. A "
        "server of the same machine whose process has ended is found at once instead (at "
        "start, on each renewal, and when a follower or a retried key meets its work). "
        "Must be more than lease_renew_seconds.",
    ).tag(config=True)

    lease_renew_seconds = Float(
        RENEW_SECONDS,
        help="How often this server renews its lease and fails the tasks of servers whose "
        "lease has lapsed or whose process of this machine has ended.",
    ).tag(config=True)

    event_retention_seconds = Int(
        3600, help="How long a finished task's events stay replayable (then 410)."
    ).tag(config=True)

    task_retention_seconds = Int(
        86400, help="How long a finished task and its result stay (then 404)."
    ).tag(config=True)

    response_retention_seconds = Int(
        30 * 86400, help="How long responses kept with store: true stay (then 404)."
    ).tag(config=True)

    purge_interval_seconds = Float(
        60.0, help="How often expired events, tasks, responses and keys are purged."
    ).tag(config=True)

    @default("store_path")
    def _default_store_path(self) -> str:
        return str(Path(jupyter_data_dir()) / "lmsp" / "lmsp.sqlite3")

    @default("store_url")
    def _default_store_url(self) -> str:
        return f"sqlite:///{Path(self.store_path).expanduser()}"

    def __init__(self, **kwargs: Any) -> None:
        """Open the store and take this server's lease; ``kwargs`` are ``parent``, ``config``,
        ``log`` and traits. A setting that cannot work raises ``TraitError``."""
        super().__init__(**kwargs)
        if self.lease_seconds <= self.lease_renew_seconds:
            raise TraitError(
                f"TaskStore.lease_seconds ({self.lease_seconds:g}) must be more than "
                f"TaskStore.lease_renew_seconds ({self.lease_renew_seconds:g})"
            )
        try:
            self.store: Database = open_store(self.store_url)
        except ValueError as exc:
            raise TraitError(f"TaskStore.store_url: {exc}") from None
        self.log.info("LMSP store: %s", self.store.describe())
        self.lease = Lease(LeaseRecords(self.store), seconds=self.lease_seconds)
        self.lease.renew()
        self._timers: list[PeriodicCallback] = []

    def start(self, responses: ResponseService, limits: OwnerLimits) -> TaskService:
        """Run ``responses``' tasks under this server's lease (failing those of servers that
        are gone), keep idempotency keys, and renew the lease and purge on their timers."""
        self.tasks = TaskService(
            responses,
            TaskRecords(self.store),
            self.lease,
            event_retention_seconds=self.event_retention_seconds,
            task_retention_seconds=self.task_retention_seconds,
            follow_poll_seconds=self.follow_poll_seconds,
            limits=limits,
        )
        self._recovered(self.tasks.recover())
        self.idempotency = IdempotencyKeys(
            IdempotencyRecords(self.store), self.lease.holder, end_dead=self.tasks.end_dead
        )
        self._timers = [
            PeriodicCallback(self._purge, self.purge_interval_seconds * 1000),
            PeriodicCallback(self._renew_lease, self.lease_renew_seconds * 1000),
        ]
        for timer in self._timers:
            timer.start()
        return self.tasks

    def _recovered(self, failed: int) -> None:
        if failed:
            self.log.warning(
                "%d tasks of servers that stopped (this store's earlier ones, or another "
                "that shares it) were failed: service_restarted",
                failed,
            )

    def _renew_lease(self) -> None:
        """Renew the lease on the event loop (a quick write; on a thread, a busy pool could
        delay it past its expiry), then fail what servers that are gone held."""
        try:
            self._recovered(self.tasks.renew())
        except Exception:  # the store fails now: the next tick tries again
            self.log.exception("the lease on the store could not be renewed")

    async def _purge(self) -> None:
        """Retention, off the event loop: SQLite deletes run on a worker thread."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.purge)

    def purge(self) -> None:
        """Drop what has expired: events, tasks, stored responses and idempotency keys."""
        events, tasks = self.tasks.purge()
        responses = self.tasks.responses.records
        kept = responses.purge(now() - self.response_retention_seconds) if responses else 0
        keys = self.idempotency.purge()
        if events or tasks or kept or keys:
            self.log.info(
                "purged the events of %d tasks, %d tasks, %d responses, %d idempotency keys",
                events,
                tasks,
                kept,
                keys,
            )

    async def close(self) -> None:
        """Stop the timers and the tasks, and close the store."""
        for timer in self._timers:
            timer.stop()
        if hasattr(self, "tasks"):
            await self.tasks.close()
        self.store.close()
