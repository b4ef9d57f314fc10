"""Idempotency keys (LMSP 1.0 section 9.2): the same key and body give the first answer again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..protocol.errors import PROBLEM_STATUSES, LmspError, Problem
from .store.interface import Transaction
from .store.records import IdempotencyRecords, now

KEY_TTL_SECONDS = 24 * 3600
#: How often a request waits to see the answer of a key whose first attempt another server runs.
ELSEWHERE_POLL_SECONDS = 0.1


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

    An action hands it to the service, which writes the answer with ``keep`` inside the very
    transaction that creates something durable: a process killed between the two would
    otherwise leave the creation stored and its key free, and a retry would create it twice.
    """

    def __init__(self, records: IdempotencyRecords, owner: str, key: str) -> None:
        self._records = records
        self._owner = owner
        self._key = key
        self.kept = False

    def keep(self, db: Transaction, status: int, body: str) -> None:
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
    """Runs a creating request at most once per (owner, key), among all the servers that share
    the store: a key is claimed by this process (``holder``, its lease) while its first attempt
    runs, and free again if the attempt kept no answer or its process is gone.

    ``end_dead`` ends what the dead servers of this machine held and says whether there were
    any: a key in flight on one of them is then free at once, not when its lease lapses.
    """

    def __init__(
        self,
        records: IdempotencyRecords,
        holder: str,
        *,
        end_dead: Callable[[], bool] | None = None,
    ) -> None:
        self.records = records
        self.holder = holder
        self.end_dead = end_dead
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

        A stored problem is raised again; while the first attempt runs (here or on another
        server), a second one waits for it (``wait_if_running``) or gets
        ``idempotency_in_progress``. ``None``: the action had no answer to keep, and the key
        is free again.
        """
        if key is None:
            answer = await action(None)
            return None if answer is None else Outcome(*answer, replayed=False)
        slot = (owner, key)
        while True:
            running = self._running.get(slot)
            if running is None:  # a free key is claimed at once, its check included
                at = now()
                if self.records.claim(
                    owner, key, fingerprint, self.holder, at, at - KEY_TTL_SECONDS
                ):
                    return await self._first(slot, action)
            row = self.records.get(owner, key)
            if row is None and running is None:  # freed since: claim it
                continue
            if row is not None:
                if row["fingerprint"] != fingerprint:
                    raise LmspError(
                        "idempotency_key_reused",
                        "this idempotency key was used with another request",
                    )
                if row["status"] is not None:
                    return _replay(row["status"], row["body"])
            if running is None and self.end_dead is not None and self.end_dead():
                continue  # its server was dead: the key is free now
            if not wait_if_running:
                raise LmspError(
                    "idempotency_in_progress", "the first request with this key is running"
                )
            if running is not None:
                await asyncio.shield(running)
            else:  # another server runs it: its answer (or the key, freed) shows in the store
                await asyncio.sleep(ELSEWHERE_POLL_SECONDS)

    async def _first(self, slot: tuple[str, str], action: Action) -> Outcome | None:
        """Run the first attempt of a key just claimed."""
        owner, key = slot
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
