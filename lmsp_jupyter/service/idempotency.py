"""Idempotency keys (LMSP 1.0 section 9.2): the same key and body give the first answer again."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..protocol.errors import PROBLEM_STATUSES, LmspError, Problem
from .store import IdempotencyRecords, now

KEY_TTL_SECONDS = 24 * 3600


@dataclass(frozen=True)
class Outcome:
    """The answer to a request: fresh, or replayed from its key."""

    status: int
    body: str
    replayed: bool


#: What an action returns: its answer, or ``None`` when it has none to keep (it was cut short,
#: or failed on the server's side after its reply had begun, as a stream can).
Answer = tuple[int, str] | None


class Claim:
    """A key whose first attempt runs now.

    An action that creates something durable writes its answer with ``keep`` inside the very
    transaction that creates it: a process killed between the two would otherwise leave the
    creation stored and its key free, and a retry would create it a second time.
    """

    def __init__(self, records: IdempotencyRecords, owner: str, key: str) -> None:
        self._records = records
        self._owner = owner
        self._key = key
        self.kept = False

    def keep(self, db: sqlite3.Connection, status: int, body: str) -> None:
        """Record the answer in ``db``'s open transaction."""
        self._records.complete_in(db, self._owner, self._key, status, body)
        self.kept = True

    def answer(self, status: int, body: str) -> None:
        """Record the answer now, before the client has all of it (a stream's last event)."""
        self._records.complete(self._owner, self._key, status, body)
        self.kept = True


#: A creating request: given the claim on its key (``None``: no key), it returns its answer.
Action = Callable[[Claim | None], Awaitable[Answer]]


class IdempotencyKeys:
    """Runs a creating request at most once per (owner, key)."""

    def __init__(self, records: IdempotencyRecords) -> None:
        self.records = records
        self._running: dict[tuple[str, str], asyncio.Future[None]] = {}

    async def once(
        self,
        owner: str,
        key: str | None,
        fingerprint: str,
        action: Action,
        *,
        wait_if_running: bool,
    ) -> Outcome | None:
        """Run ``action`` unless ``key`` already has an answer for this request.

        A stored problem is raised again; while the first attempt runs, a second one waits
        for it (``wait_if_running``) or gets ``idempotency_in_progress``. ``None``: the
        action had no answer to keep, and the key is free again.
        """
        if key is None:
            answer = await action(None)
            return None if answer is None else Outcome(*answer, replayed=False)
        slot = (owner, key)
        row = self.records.get(owner, key)
        if row is not None and row["created_at"] < now() - KEY_TTL_SECONDS:
            row = None
        if row is not None and row["status"] is None and slot not in self._running:
            row = None  # claimed by an attempt that died with its process: never blocked
        if row is not None:
            if row["fingerprint"] != fingerprint:
                raise LmspError(
                    "idempotency_key_reused", "this idempotency key was used with another request"
                )
            if row["status"] is None:
                running = self._running.get(slot)
                if not wait_if_running or running is None:
                    raise LmspError(
                        "idempotency_in_progress", "the first request with this key is running"
                    )
                await asyncio.shield(running)
                row = self.records.get(owner, key)
                if row is None:  # the first attempt kept no answer (it failed): this one is first
                    return await self._first(slot, fingerprint, action)
            return _replay(row["status"], row["body"])
        return await self._first(slot, fingerprint, action)

    async def _first(
        self,
        slot: tuple[str, str],
        fingerprint: str,
        action: Action,
    ) -> Outcome | None:
        owner, key = slot
        self.records.begin(owner, key, fingerprint, now())
        claim = Claim(self.records, owner, key)
        done = self._running[slot] = asyncio.get_running_loop().create_future()
        try:
            answer = await action(claim)
        except LmspError as error:
            if claim.kept:  # what was created keeps its key, whatever failed after
                raise
            if error.is_client_error:
                self.records.complete(
                    owner, key, error.status, error.to_problem().model_dump_json()
                )
            else:
                self.records.forget(owner, key)
            raise
        except BaseException:
            if not claim.kept:
                self.records.forget(owner, key)
            raise
        finally:
            del self._running[slot]
            done.set_result(None)
        if answer is None:
            self.records.forget(owner, key)
            return None
        if not claim.kept:
            self.records.complete(owner, key, *answer)
        return Outcome(*answer, replayed=False)

    def purge(self) -> int:
        """Forget keys older than 24 hours."""
        return self.records.purge(now() - KEY_TTL_SECONDS)


def _replay(status: int, body: str) -> Outcome:
    if status in PROBLEM_STATUSES:
        problem = Problem.model_validate_json(body)
        extra = {
            k: v
            for k, v in problem.model_dump().items()
            if k not in {"type", "title", "status", "code", "detail", "message", "param"}
        }
        raise LmspError(
            problem.code,
            problem.detail,
            param=problem.param,
            replayed=True,
            **extra,
        )
    return Outcome(status, body, replayed=True)
