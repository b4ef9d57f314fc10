"""What the tests of the service suite share: requests, services over an engine (the real one or
the scripted double), and the names of the events a stream is made of."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

from lmsp_jupyter.engine.catalog import ModelCatalog
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from lmsp_jupyter.protocol.events import ResponseEvent
from lmsp_jupyter.protocol.requests import ResponseRequest, parse_response_request
from lmsp_jupyter.protocol.tasks import Task
from lmsp_jupyter.service.leases import Lease
from lmsp_jupyter.service.limits import OwnerLimits
from lmsp_jupyter.service.models import ModelDirectory
from lmsp_jupyter.service.responses import ResponseService
from lmsp_jupyter.service.store.interface import Database
from lmsp_jupyter.service.store.records import (
    LeaseRecords,
    ResponseRecords,
    StoredEvent,
    TaskRecords,
)
from lmsp_jupyter.service.tasks import TaskService
from tests.conftest import MODEL
from tests.helpers import eventually_async

#: Threads of the real engine's model.
THREADS = min(os.cpu_count() or 1, 4)

CREATED = "response.created"
IN_PROGRESS = "response.in_progress"
ADDED = "response.output_item.added"
PART_ADDED = "response.content_part.added"
DELTA = "response.output_text.delta"
DONE = "response.output_item.done"
#: How every generating stream begins (11.4).
START = [CREATED, IN_PROGRESS]
#: A message's opening events, and its closing ones, its item's done last.
MESSAGE_OPEN = [ADDED, PART_ADDED]
MESSAGE_DONE = ["response.output_text.done", "response.content_part.done", DONE]


@contextlib.contextmanager
def real_engine(context_size: int) -> Iterator[LocalEngine]:
    """The real engine with a ``context_size`` window (the model loads on first use); closed
    after."""
    engine = LocalEngine(EngineSettings(context_size=context_size, threads=THREADS))
    try:
        yield engine
    finally:
        engine.close()


def request(**fields: Any) -> ResponseRequest:
    """A parsed greedy request for the bundled model (``fields`` override)."""
    return parse_response_request({"model": MODEL, "input": "Hi", "temperature": 0, **fields})


def service_of(engine: Any, store: Database | None = None) -> ResponseService:
    """A response service over the bundled model's catalog, running on ``engine``."""
    records = ResponseRecords(store) if store is not None else None
    return ResponseService(
        ModelDirectory(ModelCatalog(include_bundled=True), engine), engine, records
    )


def services(
    engine: Any, store: Database, *, lease_seconds: float = 30.0, limits: OwnerLimits | None = None
) -> tuple[ResponseService, TaskService]:
    """The response and task services over ``engine``, storing in ``store``, under a lease of
    their own (a server process's) of ``lease_seconds``, taken, with per-owner ``limits``."""
    responses = service_of(engine, store)
    lease = Lease(LeaseRecords(store), seconds=lease_seconds)
    lease.renew()
    return responses, TaskService(responses, TaskRecords(store), lease, limits=limits)


def names(events: Sequence[ResponseEvent] | Sequence[StoredEvent]) -> list[str]:
    """The events' names, in order."""
    return [event.event for event in events]


async def follow_all(tasks: TaskService, task_id: str, after: int = 0) -> list[Any]:
    """Every event of the Jupyter owner's task ``task_id`` after ``after``, as followed."""
    return [event async for event in tasks.follow(task_id, "jupyter", after)]


async def wait_final(tasks: TaskService, task_id: str) -> Task:
    """The Jupyter owner's task ``task_id`` once it has ended."""

    async def ended() -> Task | None:
        task = tasks.get(task_id, "jupyter")
        return task if task.status not in ("queued", "in_progress") else None

    return await eventually_async(ended, interval=0.02, what=f"task {task_id} ended")
