"""The line in front of each model: as many requests run as it has slots, the rest wait.

Direct requests and tasks stand in the same line, in arrival order; a full line refuses new
requests with ``overloaded``. A request that leaves the line never reaches the model.

Priority requests (completions as the user types, which are short and wanted now) have a lane
of their own at the front: each goes after the priority requests already waiting and before
every other one, so it starts in the first slot that frees up instead of behind long answers.
"""

from __future__ import annotations

import asyncio
from collections import deque

from ..protocol.errors import LmspError
from .store.interface import RETRY_AFTER_SECONDS


class Ticket:
    """One request's place: waiting, then holding one of its model's slots until it leaves."""

    def __init__(self, line: ModelQueue, model_id: str, priority: bool = False) -> None:
        self._line = line
        self.model_id = model_id
        self.priority = priority
        self._admitted = asyncio.get_running_loop().create_future()
        self._left = False

    @property
    def admitted(self) -> bool:
        """Whether the request holds a slot."""
        return self._admitted.done()

    @property
    def position(self) -> int | None:
        """1 for the next request to start, and so on; ``None`` once admitted or gone."""
        return self._line.position(self)

    async def wait(self) -> None:
        """Until the request holds a slot."""
        await asyncio.shield(self._admitted)

    def leave(self) -> None:
        """Give the slot back, or the place in the line; the next in line may start."""
        if not self._left:
            self._left = True
            self._line.leave(self)

    def _admit(self) -> None:
        self._admitted.set_result(None)


class ModelQueue:
    """Slots per model, and the requests waiting for them (``max_waiting`` of all models)."""

    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting
        self._waiting: dict[str, deque[Ticket]] = {}
        self._slots: dict[str, int] = {}
        self._running: dict[str, int] = {}

    def check(self) -> None:
        """Refuse (``overloaded``) when the line is full."""
        if sum(map(len, self._waiting.values())) >= self.max_waiting:
            raise LmspError(
                "overloaded",
                f"{self.max_waiting} requests are already waiting for a model",
                retry_after=RETRY_AFTER_SECONDS,
            )

    def join(self, model_id: str, slots: int, *, priority: bool = False) -> Ticket:
        """A place for a request on a model with ``slots`` slots: a slot now, or in line (a
        ``priority`` one after the other priority ones, before the rest)."""
        self._slots[model_id] = slots
        ticket = Ticket(self, model_id, priority)
        line = self._waiting.setdefault(model_id, deque())
        if priority:
            line.insert(sum(1 for waiting in line if waiting.priority), ticket)
        else:
            line.append(ticket)
        self._advance(model_id)
        return ticket

    def position(self, ticket: Ticket) -> int | None:
        """Where ``ticket`` stands in its model's line, from 1."""
        for position, waiting in enumerate(self._waiting.get(ticket.model_id, ()), start=1):
            if waiting is ticket:
                return position
        return None

    def leave(self, ticket: Ticket) -> None:
        """``ticket`` gives up its slot or its place."""
        model_id = ticket.model_id
        if ticket.admitted:
            self._running[model_id] -= 1
        else:
            self._waiting[model_id].remove(ticket)
        self._advance(model_id)

    def _advance(self, model_id: str) -> None:
        line = self._waiting[model_id]
        while line and self._running.get(model_id, 0) < self._slots[model_id]:
            self._running[model_id] = self._running.get(model_id, 0) + 1
            line.popleft()._admit()
