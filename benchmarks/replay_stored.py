"""The stored half of ``replay.py``: a finished task written into a fresh store, then read.

The task of ``total`` events (created, item added, deltas, done, completed) is written with the
service's own ``TaskRecords`` before the server starts; each replay reads its whole
``GET /lmsp/v1/tasks/{id}/events`` stream and checks it against what was stored.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from benchmarks.harness.meters import PhaseCost, PhaseMeter
from benchmarks.harness.server import Server
from benchmarks.harness.sse import parse_events
from lmsp_jupyter.client import ServerSentEvent
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID
from lmsp_jupyter.protocol.events import (
    FINAL_EVENTS,
    EventData,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    ResponseCompleted,
    ResponseCreated,
    ResponseEvent,
)
from lmsp_jupyter.protocol.ids import new_id
from lmsp_jupyter.protocol.items import OutputMessage, OutputText
from lmsp_jupyter.protocol.requests import parse_response_request
from lmsp_jupyter.protocol.responses import Response, Usage
from lmsp_jupyter.service.responses import OWNER
from lmsp_jupyter.service.store import open_store
from lmsp_jupyter.service.store.records import FinalState, StoredEvent, TaskRecords, now

WORDS = (" The", " keeper", " climbed", " the", " tower", ",", " and", " the", " lamp", ".")
DEFAULT_PROMPT = "Write a long story."
MB = 1_000_000
#: The process the stored task names as its runner: none that serves (the task is final).
HOLDER = "replay_stored"


def check_sequence(
    events: Sequence[ServerSentEvent], expected: Sequence[ServerSentEvent], who: str
) -> list[str]:
    """FAIL lines unless ``events`` equals ``expected``: same ids, names and data, in order."""
    ids = [int(event.id) for event in events]
    want = [int(event.id) for event in expected]
    if ids != want:
        missing, extra = sorted(set(want) - set(ids)), len(ids) - len(set(ids))
        return [
            f"FAIL {who}: {len(ids)} events, ids {_span(ids)}, expected {_span(want)}; "
            f"missing {len(missing)} (first {missing[:3]}), duplicates {extra}"
        ]
    changed = [got.id for got, ref in zip(events, expected, strict=True) if got != ref]
    if changed:
        return [f"FAIL {who}: {len(changed)} events differ from the stored ones: {changed[:5]}"]
    if expected and expected[-1].event not in FINAL_EVENTS:
        return [f"FAIL {who}: the stream did not end with a final event ({expected[-1].event})"]
    return []


def _span(ids: Sequence[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if ids else "none"


def stored_task_events(response_id: str, message_id: str, total: int) -> list[StoredEvent]:
    """A completed response of ``total`` events: created, item added, deltas, done, completed."""
    deltas = [WORDS[index % len(WORDS)] for index in range(total - 4)]
    text = "".join(deltas)
    usage = Usage(input_tokens=12, output_tokens=len(deltas), total_tokens=12 + len(deltas))
    response = Response(id=response_id, created_at=0, status="in_progress", model=BUNDLED_MODEL_ID)
    data: list[EventData] = [
        ResponseCreated(response_id=response_id, response=response),
        OutputItemAdded(response_id=response_id, output_index=0, item=OutputMessage(id=message_id)),
        *(
            OutputTextDelta(
                response_id=response_id,
                item_id=message_id,
                output_index=0,
                content_index=0,
                delta=d,
            )
            for d in deltas
        ),
        OutputItemDone(
            response_id=response_id,
            output_index=0,
            item=OutputMessage(id=message_id, content=[OutputText(text=text)]),
        ),
        ResponseCompleted(response_id=response_id, usage=usage, response=response),
    ]
    events = [ResponseEvent(number, item) for number, item in enumerate(data, start=1)]
    return [StoredEvent(event.id, event.event, event.data_json()) for event in events]


def final_state(response_id: str, events: Sequence[StoredEvent], at: int) -> FinalState:
    """The task's end as the service stores it with its final event."""
    done = OutputItemDone.model_validate_json(events[-2].data)
    completed = ResponseCompleted.model_validate_json(events[-1].data)
    result = Response(
        id=response_id,
        created_at=at,
        status="completed",
        model=BUNDLED_MODEL_ID,
        output=[done.item],
        usage=completed.usage,
    )
    return FinalState(status="completed", result=result.model_dump_json(), error=None, at=at)


@dataclass(frozen=True)
class StoredTask:
    """The finished task written before the server starts."""

    id: str
    events: list[ServerSentEvent]
    fill_s: float


def fill_store(url: str, total: int) -> StoredTask:
    """Write one finished task of ``total`` events into the store at ``url`` (SQLite or
    PostgreSQL, as ``TaskStore.store_url``), one ``append`` (transaction) per event."""
    task_id, response_id, message_id = new_id("task"), new_id("resp"), new_id("msg")
    events = stored_task_events(response_id, message_id, total)
    request = parse_response_request({"model": BUNDLED_MODEL_ID, "input": DEFAULT_PROMPT})
    store = open_store(url)
    records = TaskRecords(store)
    start, at = time.perf_counter(), now()
    records.insert(
        task_id=task_id,
        owner=OWNER,
        holder=HOLDER,
        model=BUNDLED_MODEL_ID,
        response_id=response_id,
        request=request.model_dump_json(by_alias=True, exclude_none=True),
        metadata={},
        at=at,
    )
    records.started(task_id, HOLDER, at)
    for event in events[:-1]:
        records.append(task_id, HOLDER, event)
    records.append(task_id, HOLDER, events[-1], final_state(response_id, events, now()))
    fill_s = time.perf_counter() - start
    store.close()
    expected = [ServerSentEvent(e.event, e.data, str(e.id)) for e in events]
    return StoredTask(task_id, expected, fill_s)


@dataclass(frozen=True)
class ReplayRun:
    """One full read of the stored task's event stream."""

    seconds: float
    first_byte_s: float
    size: int
    events: list[ServerSentEvent]

    @property
    def events_per_s(self) -> float:
        """Events received per second, request to last byte."""
        return len(self.events) / self.seconds

    @property
    def mb_per_s(self) -> float:
        """Stream bytes per second, request to last byte, in MB (10^6 bytes)."""
        return self.size / MB / self.seconds


def replay_once(client: httpx.Client, task_id: str) -> ReplayRun:
    """Read the whole stream as bytes while timed; parse it afterwards."""
    chunks: list[bytes] = []
    start = time.perf_counter()
    first = 0.0
    with client.stream("GET", f"/lmsp/v1/tasks/{task_id}/events") as response:
        response.raise_for_status()
        for chunk in response.iter_raw():
            first = first or time.perf_counter() - start
            chunks.append(chunk)
    seconds = time.perf_counter() - start
    body = b"".join(chunks)
    return ReplayRun(seconds, first, len(body), parse_events(body))


def replay_phase(
    server: Server, stored: StoredTask, runs: int
) -> tuple[list[ReplayRun], PhaseCost]:
    """``runs`` sequential replays of the stored task, each checked against what was stored."""
    with (
        httpx.Client(base_url=server.base_url, headers=server.headers, timeout=120) as client,
        PhaseMeter(server.pid) as meter,
    ):
        results = []
        for number in range(1, runs + 1):
            run = replay_once(client, stored.id)
            failures = check_sequence(run.events, stored.events, f"replay run {number}")
            print(
                f"  run {number}: {len(run.events)} events in {run.seconds * 1000:7.1f} ms, "
                f"{run.events_per_s:8.0f} events/s, {run.mb_per_s:5.2f} MB/s, "
                f"first byte {run.first_byte_s * 1000:5.1f} ms"
                f"  {'ok' if not failures else 'FAIL'}",
                flush=True,
            )
            for line in failures:
                print(f"  {line}")
            results.append(run)
    return results, meter.usage
