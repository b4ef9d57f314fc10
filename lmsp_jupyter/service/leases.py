"""This process's lease in a store that several Jupyter servers may share.

All of a user's Jupyter servers keep their tasks in one store by default. Each server process
holds a lease there while it lives and names itself as the holder of the tasks it runs and the
idempotency keys it has in flight; another server ends that work (tasks ``failed`` with
``service_restarted``, keys freed) once the lease is no one's: the process stopped cleanly,
or stopped renewing for longer than the lease lasts, or — for a process of this machine — it
is gone.

A lease names its process by where pids mean the same (:func:`this_machine`: the boot and the
pid namespace) and by its pid and the kernel's start time of that pid (``/proc/<pid>/stat``),
so a reused pid is another process. A server that finds such a lease's process gone (at start,
on each renewal, when a follower or a key meets its work) drops it at once, instead of waiting
out the lease: a restart ends what its killed predecessor held before it answers. Leases of
other machines, or taken where ``/proc`` is missing, are ended only when they lapse. A lock
file freed by the kernel would not do: a PostgreSQL store has no file beside it, and its
replicas share no file system.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from functools import cache
from pathlib import Path

from ulid import ULID

from .store.records import LeaseRecords

log = logging.getLogger(__name__)

#: How long a lease lasts without being renewed.
LEASE_SECONDS = 30.0
#: How often a server renews its lease (and ends what gone servers held).
RENEW_SECONDS = 10.0
#: Where Linux shows its processes.
PROC = Path("/proc")


@cache
def this_machine() -> str | None:
    """Where pids name the same processes as here: this boot of this kernel, this pid
    namespace; ``None`` without ``/proc`` (processes are then never judged by their pid)."""
    try:
        boot = (PROC / "sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat(PROC / "self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}/{namespace}"


def process_start(pid: int) -> int | None:
    """The kernel's start time of process ``pid`` (clock ticks after boot); ``None``: no
    such process to be seen, or it has ended and waits for its parent (a zombie)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the name, which may hold anything
    state, start = fields[0], fields[19]  # fields 3 and 22 of proc(5)
    return None if state in ("Z", "X") else int(start)


def process_gone(pid: int, start: int) -> bool:
    """Whether the process of this machine that was ``pid``, started at ``start``, is gone
    (a pid another process has since taken counts as gone). A process that cannot be seen
    but may exist (another user's, under ``hidepid``) is not."""
    if pid <= 0:  # not a process (kill would signal a group)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    if not (PROC / str(pid)).exists():
        return False  # it exists (kill found it) but is hidden from this user
    return process_start(pid) != start


class Lease:
    """The lease of this process: a new holder id per start, with its host, pid and the
    process's start (how other servers of this machine tell that it is gone)."""

    def __init__(self, records: LeaseRecords, *, seconds: float = LEASE_SECONDS) -> None:
        self.records = records
        self.seconds = seconds
        self.holder = str(ULID())
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = time.time()
        self.machine = this_machine()
        self.process_start = process_start(self.pid) if self.machine is not None else None
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
            machine=self.machine,
            process_start=self.process_start,
        )
        if self._held and not held:
            log.warning(
                "this server's lease on its store lapsed (renewed more than %g s apart): "
                "other servers sharing the store may have failed its unfinished tasks",
                self.seconds,
            )
        self._held = True

    def drop_dead(self) -> int:
        """Drop at once the leases of this machine's processes that are gone (dead: what they
        held is then no one's); returns how many."""
        if self.machine is None:
            return 0
        gone = [
            row["holder"]
            for row in self.records.of_machine(self.machine)
            if row["holder"] != self.holder and process_gone(row["pid"], row["process_start"])
        ]
        for holder in gone:
            log.info("the server that held lease %s is gone: its work ends now", holder)
            self.records.release(holder)
        return len(gone)

    def release(self) -> None:
        """Give the lease up: this process runs nothing more."""
        self.records.release(self.holder)
        self._held = False
