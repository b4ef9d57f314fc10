"""Tasks: responses run in the background, in their model's line, their events kept.

Every event is stored before it is published; followers of a running task read a shared
in-memory list of its events (replay and live in one sequence, no gap, no duplicate), and
followers of a finished task read the store.

Several servers may share the store: each runs the tasks it created, under its lease
(:mod:`.leases`), and reads the others' from the store: a follower of a task that another
server runs reads its events as they are stored (polled every ``follow_poll_seconds``), and a
cancel is recorded for the server running the task, which sees it with its next stored event
(or its next lease renewal while the task waits in line). A task whose server is gone (its
lease lapsed, or its process of this machine ended) is failed with ``service_restarted`` by
whichever server finds it: at start, on each renewal, or as a follower waits for its events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from pydantic import TypeAdapter, ValidationError

from ..engine.generation import CancelToken
from ..protocol.errors import LmspError, Problem
from ..protocol.events import (
    ResponseCancelled,
    ResponseEvent,
    ResponseFailed,
)
from ..protocol.ids import new_id
from ..protocol.requests import (
    Metadata,
    ResponseRequest,
    parse_response_request,
    validate_request,
)
from ..protocol.responses import Response, ResponseStatus
from ..protocol.tasks import FINAL_TASK_STATUSES, Task, TaskRequest, TaskStatus
from .channel import Channel, Interrupted
from .idempotency import Claim
from .leases import Lease
from .limits import OwnerLimits
from .queue import Ticket
from .responses import ResponseService
from .run import ResponseRun
from .store.interface import Row
from .store.records import FinalState, StoredEvent, TaskLost, TaskRecords, now

log = logging.getLogger(__name__)

#: The first wait before a final event the store refused is tried again (it doubles).
STORE_RETRY_SECONDS = 0.5
#: How often a follower of a task that another server runs looks for its new events.
FOLLOW_POLL_SECONDS = 0.05
#: How often such a follower, while no event comes, looks whether that server is dead.
DEAD_CHECK_SECONDS = 1.0


_METADATA = TypeAdapter(Metadata)


def _metadata_filter(pairs: dict[str, str]) -> dict[str, str]:
    """A listing's ``metadata.KEY=VALUE`` pairs, held to the rules of metadata itself (11.1)."""
    try:
        return _METADATA.validate_python(pairs)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        loc = error["loc"]
        param = f"metadata.{loc[0]}" if loc else "metadata"
        raise LmspError("invalid_request", f"{param}: {error['msg']}", param=param) from None


@dataclass
class _Queued:
    """A task that is waiting in its model's line or running."""

    task_id: str
    run: ResponseRun
    ticket: Ticket
    cancel: CancelToken = field(default_factory=CancelToken)
    #: The id of the newest event stored.
    last_id: int = 0
    worker: asyncio.Task[None] | None = None


class TaskService:
    """Creates, runs, lists, cancels and replays tasks."""

    def __init__(
        self,
        responses: ResponseService,
        records: TaskRecords,
        lease: Lease,
        *,
        event_retention_seconds: int = 3600,
        task_retention_seconds: int = 86400,
        follow_poll_seconds: float = FOLLOW_POLL_SECONDS,
        limits: OwnerLimits | None = None,
    ) -> None:
        self.responses = responses
        self.limits = limits or OwnerLimits()
        self.records = records
        self.lease = lease
        self.event_retention_seconds = event_retention_seconds
        self.task_retention_seconds = task_retention_seconds
        self.follow_poll_seconds = follow_poll_seconds
        self._live: dict[str, _Queued] = {}
        self._channels: dict[str, Channel] = {}
        self._closing = False

    # --- creating and running -------------------------------------------------------------

    async def create(self, body: dict[str, object], owner: str, claim: Claim | None = None) -> Task:
        """Validate a task request like a response request, then queue it (no task on error).

        With ``claim``, the new task is its key's answer (``202``), stored in the transaction
        that stores the task: both are stored, or neither.
        """
        task_request = validate_request(TaskRequest, body)
        try:
            request = parse_response_request({**task_request.request, "stream": False})
            task, _ = await self._queue(
                request, owner, claim, lambda task, _: (202, task.model_dump_json())
            )
            return task
        except LmspError as error:  # name the field as the client sent it, inside "request"
            error.rename_param(lambda param: f"request.{param}")
            raise

    async def submit(
        self, request: ResponseRequest, owner: str, claim: Claim | None = None
    ) -> tuple[Task, Response]:
        """Queue a validated request as a background response (11.2): its task, and the
        response as it stands queued. With ``claim``, that response is its key's answer
        (``200``), stored with the task."""
        return await self._queue(
            request, owner, claim, lambda _, response: (200, response.model_dump_json())
        )

    async def _queue(
        self,
        request: ResponseRequest,
        owner: str,
        claim: Claim | None,
        answer: Callable[[Task, Response], tuple[int, str]],
    ) -> tuple[Task, Response]:
        """Queue a validated request as a task; ``claim`` keeps ``answer`` of it, in the
        transaction that stores the task."""
        run = await self.responses.start(request, owner)
        queued = _Queued(task_id=new_id("task"), run=run, ticket=self.responses.join(run))
        metadata = request.metadata or {}
        created = Task(
            id=queued.task_id,
            status="queued",
            created_at=run.created_at,
            response_id=run.id,
            metadata=metadata,
        )
        response = _queued(run.response())
        try:
            inserted = self.records.insert(
                task_id=queued.task_id,
                owner=owner,
                holder=self.lease.holder,
                model=run.entry.id,
                response_id=run.id,
                request=request.model_dump_json(by_alias=True, exclude_none=True),
                metadata=metadata,
                at=run.created_at,
                then=None
                if claim is None
                else lambda db: claim.keep(db, *answer(created, response)),
                max_unfinished=self.limits.max_tasks,
            )
            if not inserted:  # the owner's limit, reached while this one was being started
                raise self.limits.tasks_refused()
        except BaseException:  # not stored: it gives its place in the line back
            queued.ticket.leave()
            raise
        self._channels[queued.task_id] = Channel()
        self._live[queued.task_id] = queued
        queued.worker = asyncio.create_task(self._work(queued))
        return self.get(queued.task_id, owner), response

    async def _work(self, queued: _Queued) -> None:
        try:
            await self._run(queued)
        finally:
            del self._live[queued.task_id]

    async def _run(self, queued: _Queued) -> None:
        def started() -> None:
            if self.records.started(queued.task_id, self.lease.holder, now()):
                queued.cancel.cancel()  # asked of another server while it waited

        try:
            events = self.responses.events(queued.run, queued.cancel, started)
            async with contextlib.aclosing(events):  # a failed store stops the generation
                async for event in events:
                    self._record(queued.task_id, queued.run, event, queued)
        except TaskLost:
            self._lost(queued.task_id)
        except Exception:
            log.exception("task %s failed", queued.task_id)
            await self._fail(queued)

    def _lost(self, task_id: str) -> None:
        """A task another server ended while this one ran it (this one's lease had lapsed):
        it stops here, and its live followers get what is stored, its final event last."""
        log.warning("task %s was ended by another server while this one ran it", task_id)
        channel = self._channels.pop(task_id, None)
        if channel is None:
            return
        after = channel.events[-1].id if channel.events else 0
        for event in self.records.events_after(task_id, after):
            channel.publish(event)

    async def _fail(self, queued: _Queued) -> None:
        """End a task that failed on the service's side with ``response.failed``, stored.

        While the store refuses it, live followers get an ``error`` event (they resume from
        the store later) and the final event is retried until the store takes it again.
        """
        error = LmspError("internal_error", "the task failed; see the server log")
        queued.run.status, queued.run.error = "failed", error
        failed = ResponseFailed(
            response_id=queued.run.id, error=error.to_problem(), response=queued.run.response()
        )
        final = ResponseEvent(id=queued.last_id + 1, data=failed)
        delay = STORE_RETRY_SECONDS
        while not self._closing:
            try:
                self._record(queued.task_id, queued.run, final, queued)
                return
            except TaskLost:
                self._lost(queued.task_id)
                return
            except Exception:
                log.warning("task %s: the store refuses its final event; retrying", queued.task_id)
                channel = self._channels.get(queued.task_id)
                if channel is not None and channel.interrupted is None:
                    problem = LmspError(
                        "internal_error", "the task's events cannot be stored now; reconnect later"
                    ).to_problem()
                    channel.interrupt(problem)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    def _record(
        self,
        task_id: str,
        run: ResponseRun,
        event: ResponseEvent,
        queued: _Queued | None = None,
    ) -> None:
        if self._closing:  # what a stopping service cut short is failed by ``close``
            return
        stored = StoredEvent.of(event)
        final = None
        if event.is_final:
            final = FinalState(
                status=run.status,
                result=run.response().model_dump_json(),
                error=run.error.to_problem().model_dump_json() if run.error else None,
                at=now(),
            )
        cancel_asked = self.records.append(task_id, self.lease.holder, stored, final)
        if queued is not None:
            queued.last_id = event.id
            if cancel_asked and final is None:  # another server was asked to cancel it
                queued.cancel.cancel()
        channel = self._channels.get(task_id)
        if channel is not None:
            channel.publish(stored)
            if final is not None:
                del self._channels[task_id]

    # --- reading ----------------------------------------------------------------------------

    def _row(self, task_id: str, owner: str) -> Row:
        row = self.records.get(task_id)
        if row is None or row["owner"] != owner:
            raise LmspError("task_not_found", f"no task {task_id!r}")
        return row

    def get(self, task_id: str, owner: str) -> Task:
        """A task of ``owner``; unknown, purged or another owner's → ``task_not_found``."""
        return self._task(self._row(task_id, owner))

    def owner(self, task_id: str) -> str | None:
        """Whose task ``task_id`` is (for an admin reaching it); ``None``: nobody's."""
        return self.records.owner(task_id)

    def unfinished(self, owner: str) -> int:
        """How many of ``owner``'s tasks are queued or running."""
        return self.records.unfinished(owner)

    def list(
        self,
        owner: str,
        limit: int = 20,
        status: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> list[Task]:
        """``owner``'s tasks, newest first; with ``metadata``, those having every pair of it."""
        if not 1 <= limit <= 100:
            raise LmspError("invalid_request", "limit must be from 1 to 100", param="limit")
        if status is not None and status not in TaskStatus.__args__:  # type: ignore[attr-defined]
            raise LmspError("invalid_request", f"unknown status {status!r}", param="status")
        wanted = _metadata_filter(metadata or {})
        return [self._task(row) for row in self.records.newest(owner, limit, status, wanted)]

    def _task(self, row: Row) -> Task:
        return Task(
            id=row["id"],
            status=row["status"],
            created_at=row["created_at"],
            started_at=row["started_at"],
            completed_at=row["completed_at"],
            response_id=row["response_id"],
            last_event_id=row["last_event_id"],
            result=Response.model_validate_json(row["result"]) if row["result"] else None,
            error=Problem.model_validate_json(row["error"]) if row["error"] else None,
            metadata=json.loads(row["metadata"]),
            queue_position=self._queue_position(row["id"]) if row["status"] == "queued" else None,
        )

    def task_of_response(self, response_id: str, owner: str) -> str:
        """The task that runs a background response; none (or another owner's) →
        ``response_not_found``."""
        row = self.records.of_response(response_id)
        if row is None or row["owner"] != owner:
            raise LmspError("response_not_found", f"no background response {response_id!r}")
        task_id: str = row["id"]
        return task_id

    def response(self, response_id: str, owner: str) -> Response:
        """A background response as it stands: queued, running or final (11.2)."""
        row = self._row(self.task_of_response(response_id, owner), owner)
        if row["result"]:
            return Response.model_validate_json(row["result"])
        live = self._live.get(row["id"])
        if live is None:  # another server runs it: as the store has it, without its output
            return _stored_response(row, row["status"])
        response = live.run.response()
        return _queued(response) if row["status"] == "queued" else response

    def _queue_position(self, task_id: str) -> int | None:
        queued = self._live.get(task_id)
        return queued.ticket.position if queued is not None else None

    def follow(
        self, task_id: str, owner: str, after: int
    ) -> AsyncIterator[StoredEvent | Interrupted]:
        """The task's events after ``after``: stored ones, then live ones until the final one.

        Unknown task and expired history are refused here, before any event is sent.
        """
        row = self._row(task_id, owner)
        if row["events_expired"] and after < row["last_event_id"]:
            raise LmspError(
                "event_history_expired",
                f"the events of {task_id!r} are past their retention; GET the task instead",
            )
        channel = self._channels.get(task_id)
        if channel is not None:
            return channel.follow(after)
        if row["status"] in FINAL_TASK_STATUSES:
            return self._stored_events(task_id, after)
        return self._elsewhere(task_id, after)

    async def _stored_events(self, task_id: str, after: int) -> AsyncIterator[StoredEvent]:
        while events := self.records.events_after(task_id, after):
            for event in events:
                yield event
            after = events[-1].id

    async def _elsewhere(self, task_id: str, after: int) -> AsyncIterator[StoredEvent]:
        """The events of a task that another server runs, as that server stores them, until
        the final one (which, if that server is gone, the first server to find it gone
        stores: this one, if its process ended on this machine)."""
        checked = 0.0
        while True:
            async for event in self._stored_events(task_id, after):
                yield event
                if event.is_final:
                    return
                after = event.id
            if time.monotonic() - checked >= DEAD_CHECK_SECONDS:
                checked = time.monotonic()
                self.end_dead()
            await asyncio.sleep(self.follow_poll_seconds)

    # --- cancelling, recovering, purging ----------------------------------------------------

    def cancel(self, task_id: str, owner: str) -> Task:
        """Stop a task: a running one after its current token; a final one stays as it is."""
        row = self._row(task_id, owner)
        if row["status"] in FINAL_TASK_STATUSES:
            return self._task(row)
        queued = self._live.get(task_id)
        if queued is None:  # another server runs it (or it is ending right now)
            self.records.request_cancel(task_id)
            return self._task(row)
        if queued.ticket.admitted:
            queued.cancel.cancel()
            return self._task(row)
        self._dequeue(queued)
        return self.get(task_id, owner)

    def _dequeue(self, queued: _Queued) -> None:
        """Cancel a task still waiting in line: it ends ``cancelled`` at once."""
        self._stop_waiting(queued)
        queued.run.status = "cancelled"
        cancelled = ResponseCancelled(response_id=queued.run.id, response=queued.run.response())
        try:
            self._record(queued.task_id, queued.run, ResponseEvent(id=1, data=cancelled))
        except TaskLost:
            self._lost(queued.task_id)

    @staticmethod
    def _stop_waiting(queued: _Queued) -> None:
        """A queued task leaves its line without ever reaching the model."""
        queued.ticket.leave()
        if queued.worker is not None:
            queued.worker.cancel()

    def recover(self) -> int:
        """Fail with ``service_restarted`` the tasks of servers that are gone (their process
        on this machine ended, their lease lapsed or was released), and free their keys in
        flight; returns how many tasks.

        Runs at start and on every :meth:`renew`; the tasks of live servers, this one's
        included, are left to them.
        """
        self.lease.drop_dead()
        return self._end_gone()

    def end_dead(self) -> bool:
        """End at once what this machine's dead servers held, if there are any (a follower
        or a key in flight met their work): returns whether there were."""
        if not self.lease.drop_dead():
            return False
        self._end_gone()
        return True

    def _end_gone(self) -> int:
        return self.lease.records.end_gone(time.time(), _restarted)

    def renew(self) -> int:
        """Renew this server's lease, cancel what other servers were asked to cancel of its
        tasks still waiting in line (running ones see it with their next event), then
        :meth:`recover`: run every ``TaskStore.lease_renew_seconds``."""
        self.lease.renew()
        for task_id in self.records.cancels_requested(self.lease.holder):
            queued = self._live.get(task_id)
            if queued is None:
                continue
            if queued.ticket.admitted:
                queued.cancel.cancel()
            else:
                self._dequeue(queued)
        return self.recover()

    def purge(self, at: int | None = None) -> tuple[int, int]:
        """Drop expired events, then expired tasks; returns how many of each."""
        moment = now() if at is None else at
        return self.records.purge(
            events_before=moment - self.event_retention_seconds,
            tasks_before=moment - self.task_retention_seconds,
        )

    async def close(self) -> None:
        """Stop running and queued tasks, give the lease up and fail what was cut short with
        ``service_restarted`` (what a killed server leaves, the others fail once its lease
        lapses)."""
        self._closing = True
        workers = [queued.worker for queued in self._live.values() if queued.worker is not None]
        for queued in list(self._live.values()):
            if queued.ticket.admitted:
                queued.cancel.cancel()
            else:
                self._stop_waiting(queued)
        if workers:
            await asyncio.wait(workers, timeout=10)
        try:
            self.lease.release()
            self.recover()
        except Exception:  # the store fails: the others fail these tasks once the lease lapses
            log.exception("the store failed: this server's tasks stay until its lease lapses")


def _queued(response: Response) -> Response:
    """A response as it stands while its task waits in the queue."""
    return response.model_copy(update={"status": "queued"})


def _stored_response(row: Row, status: ResponseStatus, error: Problem | None = None) -> Response:
    """The response of a task's row in ``status``: what the store says of it, without the
    settings and output that only the process running it has."""
    return Response(
        id=row["response_id"],
        created_at=row["created_at"],
        status=status,
        model=row["model"],
        error=error,
        metadata=json.loads(row["metadata"]),
    )


def _restarted(row: Row) -> tuple[StoredEvent, FinalState]:
    """The final event and end of a task whose server is gone: ``service_restarted``."""
    problem = LmspError("service_restarted", "the service stopped while the task ran").to_problem()
    response = _stored_response(row, "failed", problem)
    failed = ResponseFailed(response_id=row["response_id"], error=problem, response=response)
    final = FinalState(
        status="failed",
        result=response.model_dump_json(),
        error=problem.model_dump_json(),
        at=now(),
    )
    return StoredEvent.of(ResponseEvent(id=row["last_event_id"] + 1, data=failed)), final
