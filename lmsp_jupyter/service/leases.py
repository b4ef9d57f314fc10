"""This process's lease in a store that several Jupyter servers may share.

All of a user's Jupyter servers keep their tasks in one store by default. Each server process
holds a lease there while it lives and names itself as the holder of the tasks it runs and the
idempotency keys it has in flight; another server ends that work (tasks ``failed`` with
``service_restarted``, keys freed) only once the lease has lapsed: the process stopped, was
killed, or stopped renewing for longer than the lease lasts.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from ulid import ULID

from .store.records import LeaseRecords

log = logging.getLogger(__name__)

#: How long a lease lasts without being renewed.
LEASE_SECONDS = 30.0
#: How often a server renews its lease (and ends what gone servers held).
RENEW_SECONDS = 10.0


class Lease:
    """The lease of this process: a new holder id per start, its host and pid for people
    reading the store."""

    def __init__(self, records: LeaseRecords, *, seconds: float = LEASE_SECONDS) -> None:
        self.records = records
        self.seconds = seconds
        self.holder = str(ULID())
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = time.time()
        self._held = False

    def renew(self) -> None:
        """Take the lease, or extend it by :attr:`seconds` from now.

        A lease found lapsed is taken again, with a warning: meanwhile another server may have
        ended this one's tasks, whose next write then stops them (``TaskLost``).
        """
        at = time.time()
        held = self.records.hold(
            self.holder,
            host=self.host,
            pid=self.pid,
            started_at=self.started_at,
            at=at,
            until=at + self.seconds,
        )
        if self._held and not held:
            log.warning(
                "this server's lease on its store lapsed (renewed more than %g s apart): "
                "other servers sharing the store may have failed its unfinished tasks",
                self.seconds,
            )
        self._held = True

    def release(self) -> None:
        """Give the lease up: this process runs nothing more."""
        self.records.release(self.holder)
        self._held = False
