"""Per-owner limits: how many direct requests an owner may run at once, and how many of its
tasks may be queued or running (a service shared by a JupyterHub's users)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from ..protocol.errors import LmspError

#: What a refused client is told to wait before it tries again, in seconds.
LIMIT_RETRY_AFTER_SECONDS = 5


class OwnerLimits:
    """The limits of each owner; 0: no limit."""

    def __init__(self, max_requests: int = 0, max_tasks: int = 0) -> None:
        self.max_requests = max_requests
        self.max_tasks = max_tasks
        self._running: Counter[str] = Counter()

    @contextmanager
    def request(self, owner: str) -> Iterator[None]:
        """Hold one of ``owner``'s direct requests while it runs; one over the limit →
        ``429 rate_limited`` with ``Retry-After``."""
        if self.max_requests and self._running[owner] >= self.max_requests:
            raise _limited(f"{self.max_requests} requests at once")
        self._running[owner] += 1
        try:
            yield
        finally:
            self._running[owner] -= 1
            if not self._running[owner]:
                del self._running[owner]

    def check_tasks(self, unfinished: int) -> None:
        """Refuse one more task of an owner who has ``unfinished`` ones queued or running.

        A quick refusal before any work; the store's conditional insert
        (``TaskRecords.insert(max_unfinished=...)``) is what holds the limit under concurrent
        requests, and refuses with :meth:`tasks_refused`."""
        if self.max_tasks and unfinished >= self.max_tasks:
            raise self.tasks_refused()

    def tasks_refused(self) -> LmspError:
        """The refusal of one task over ``max_tasks``."""
        return _limited(f"{self.max_tasks} queued or running tasks")


def _limited(what: str) -> LmspError:
    return LmspError(
        "rate_limited",
        f"this user already has {what}; retry later",
        retry_after=LIMIT_RETRY_AFTER_SECONDS,
    )
