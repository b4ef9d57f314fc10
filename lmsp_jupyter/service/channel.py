"""The live events of a running task, shared by every follower: replay and live in one sequence,
no gap, no duplicate; an ``error`` event ends them if the store fails."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..protocol.errors import Problem
from ..protocol.events import StreamError
from .store.records import StoredEvent


@dataclass(frozen=True)
class Interrupted:
    """The ``error`` event that ends the live followers of a task whose events cannot be
    stored for now. Its id is that of the last stored event (every event has one, 6.3): a
    client that reconnects with it as its cursor resumes right after what was stored."""

    problem: Problem
    last_id: int

    @property
    def data(self) -> StreamError:
        """The event's data."""
        return StreamError(error=self.problem)


class Channel:
    """The events of a live task, in order, for every follower."""

    def __init__(self) -> None:
        self.events: list[StoredEvent] = []
        self.finished = False
        self.interrupted: Interrupted | None = None
        self._wake = asyncio.Event()

    def publish(self, event: StoredEvent) -> None:
        """Add the next stored event and wake every follower."""
        self.events.append(event)
        self.finished = event.is_final
        self._wake_all()

    def interrupt(self, problem: Problem) -> None:
        """End the live followers with an ``error`` event (the store fails)."""
        self.interrupted = Interrupted(problem, self.events[-1].id if self.events else 0)
        self._wake_all()

    def _wake_all(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()

    async def follow(self, after: int) -> AsyncIterator[StoredEvent | Interrupted]:
        """The events after ``after``, then each new one as it comes, until the final one."""
        index = after
        while True:
            while index < len(self.events):
                event = self.events[index]
                index += 1
                yield event
                if event.is_final:
                    return
            if self.finished:  # a cursor past the final event: nothing more will come
                return
            if self.interrupted is not None:
                yield self.interrupted
                return
            await self._wake.wait()
