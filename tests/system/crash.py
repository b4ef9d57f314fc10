"""Crash consistency: SIGKILL a real server at random points of random workloads, restart it on
the same data directory, and check that nothing a client was given is lost or left unfinished.

One :class:`CrashRun` drives one data directory through many kill points. Each round restarts
the server, checks every invariant against what the clients of all earlier rounds received,
then starts a long task and a seeded random mix of clients (task creators and followers with
idempotent retries and reconnections, direct streams, stored conversations continued with
``previous_response_id``, model listings) and kills the server at a seeded random moment once
the long task streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness.sse import aiter_events
from lmsp_jupyter.service.store import open_store
from lmsp_jupyter.service.store.interface import Row
from tests.conftest import MODEL, LiveServer, start_server, stop_server
from tests.helpers import eventually

FINAL = {"response.completed", "response.incomplete", "response.failed", "response.cancelled"}
PROMPTS = ("Tell me about rivers.", "Count to twenty.", "Write a short poem.", "Name colours.")
#: The output tokens of each round's long task, and how long a round waits for it to stream
#: before it kills anyway (a busy machine).
LONG_TASK_TOKENS = 64
STREAMING_WITHIN = 60.0
#: A lease that outlives every round: the restarted server ends what the killed one held at
#: once because its process is gone, not because its lease lapsed.
LEASE = {"lease_seconds": 3600.0, "lease_renew_seconds": 0.5}


@dataclass(frozen=True)
class Received:
    """One event as a client received it, whole (its blank line included)."""

    id: int
    event: str
    data: dict[str, Any]


@dataclass
class Keyed:
    """A creating request sent with an ``Idempotency-Key``, and what its client got."""

    path: str
    body: dict[str, Any]
    #: The answer's status and body (a sync response or a task), or the events of a stream.
    status: int | None = None
    answer: dict[str, Any] | None = None
    events: list[Received] = field(default_factory=list)

    @property
    def stream_finished(self) -> bool:
        """The client received a whole stream, final event included."""
        return bool(self.events) and self.events[-1].event in FINAL


@dataclass
class Checks:
    """What the checks after the restarts looked at."""

    #: a task (every task at every restart)
    tasks: int = 0
    #: an event a client had received, against its replay
    events: int = 0
    #: a stored response a client was given
    stored: int = 0
    #: an idempotency key retried with its body
    keys: int = 0


@dataclass
class Figures:
    """What one run did, for the report."""

    kill_points: int = 0
    #: kills while a task was running (the store had it ``in_progress``)
    mid_stream: int = 0
    #: tasks the restarted server ended ``service_restarted``
    restarted: int = 0
    requests: int = 0
    #: tasks in the store at the last check
    tasks: int = 0
    checks: Checks = field(default_factory=Checks)


class Violation(AssertionError):
    """An invariant does not hold after a restart."""


async def sse_events(response: httpx.Response) -> AsyncIterator[Received]:
    """The whole events of a stream as they arrive, read with the client's own parser."""
    async for event in aiter_events(response):
        yield Received(int(event.id) if event.id else -1, event.event, json.loads(event.data))


class CrashRun:
    """One data directory, many kill points."""

    def __init__(
        self,
        tmp: Path,
        seed: int,
        *,
        max_output_tokens: int = 8,
        clients: int = 6,
        store_url: str | None = None,
    ) -> None:
        self.tmp = tmp
        self.rng = random.Random(seed)
        #: The store every restart shares (default: a SQLite file in ``tmp``).
        self.store_url = store_url or f"sqlite:///{tmp / 'data' / 'lmsp.sqlite3'}"
        self.max_output_tokens = max_output_tokens
        self.clients = clients
        self.figures = Figures()
        #: task id → event id → the event, as any client received it
        self.task_events: dict[str, dict[int, Received]] = {}
        #: every key ever sent, with what its client got
        self.keyed: dict[str, Keyed] = {}
        #: stored responses a client was given, by id
        self.stored: dict[str, dict[str, Any]] = {}
        self._fresh_keys: list[str] = []
        #: Set when the round's long task streams (its follower has a delta).
        self._streaming = asyncio.Event()
        self._serial = 0
        self._server: LiveServer | None = None

    # --- the rounds --------------------------------------------------------------------------

    def run(self, kill_points: int) -> Figures:
        """Kill the server ``kill_points`` times; check everything after each restart."""
        try:
            for _ in range(kill_points):
                self._start()
                asyncio.run(self._check())
                asyncio.run(self._round())
                self.figures.kill_points += 1
                self._integrity()
            self._start()
            asyncio.run(self._check())
            self._integrity()
        finally:
            if self._server is not None:
                stop_server(self._server)
        return self.figures

    def _start(self) -> None:
        """Restart the server on the store, and wait until it has ended what the killed one
        held (its tasks failed, its keys in flight freed): before it answers, as it finds the
        killed process gone."""
        config = {"TaskStore": {"store_url": self.store_url, **LEASE}}
        self._server = start_server(self.tmp / f"run{self.figures.kill_points}", config=config)
        eventually(self._settled, what="the killed server's tasks and keys ended")

    def _rows(self, sql: str) -> list[Row]:
        """What a read of the store gives, as the killed server left it."""
        store = open_store(self.store_url)
        try:
            return store.fetchall(sql)
        finally:
            store.close()

    def _settled(self) -> bool:
        unfinished = self._rows("SELECT id FROM tasks WHERE status IN ('queued', 'in_progress')")
        in_flight = self._rows("SELECT key FROM idempotency WHERE status IS NULL")
        return not unfinished and not in_flight

    def _kill(self) -> None:
        assert self._server is not None
        self._server.process.send_signal(signal.SIGKILL)
        self._server.process.wait()
        self._server = None
        running = self._rows("SELECT id FROM tasks WHERE status = 'in_progress'")
        self.figures.mid_stream += bool(running)

    def _integrity(self) -> None:
        if not self.store_url.startswith("sqlite:///"):
            return  # PostgreSQL checks its own pages; the checks above read every row
        path = self.store_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as db:
            result = db.execute("PRAGMA integrity_check").fetchone()[0]
        if result != "ok":
            raise Violation(f"integrity_check: {result}")

    def _client(self) -> httpx.AsyncClient:
        assert self._server is not None
        return httpx.AsyncClient(
            base_url=self._server.lmsp,
            headers={"Authorization": f"Bearer {self._server.token}"},
            timeout=120,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        )

    async def _round(self) -> None:
        """Random clients beside a long task; a SIGKILL at a random moment while that task
        streams (its follower has its first delta) cuts them all short."""
        kinds = (self._task, self._task, self._stream, self._conversation, self._models)
        self._streaming = asyncio.Event()
        async with self._client() as client:
            loaded = await client.post(f"/models/{MODEL}/load")  # kill while it generates
            if loaded.status_code != 200:
                raise Violation(f"load → {loaded.status_code} {loaded.text}")
            clients = [asyncio.create_task(self._guarded(self._long_task, client, 0))]
            clients += [
                asyncio.create_task(self._guarded(self.rng.choice(kinds), client, i * 0.05))
                for i in range(1, self.clients)
            ]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._streaming.wait(), STREAMING_WITHIN)
            await asyncio.sleep(self.rng.uniform(0.0, 1.0))
            self._kill()
            await asyncio.wait(clients, timeout=30)
        for done in clients:  # what a client found wrong before the kill
            if done.done() and done.exception() is not None:
                raise done.exception()  # type: ignore[misc]

    async def _guarded(self, kind: Any, client: httpx.AsyncClient, delay: float) -> None:
        await asyncio.sleep(delay)
        with contextlib.suppress(httpx.TransportError):  # the kill: what was received counts
            await kind(client)

    # --- the clients ---------------------------------------------------------------------------

    def _key(self, path: str, body: dict[str, Any]) -> tuple[str, Keyed]:
        self._serial += 1
        key = f"crash-{self._serial}"
        self.keyed[key] = keyed = Keyed(path, body)
        self._fresh_keys.append(key)
        return key, keyed

    def _request(self, **fields: Any) -> dict[str, Any]:
        return {
            "model": MODEL,
            "input": self.rng.choice(PROMPTS),
            "temperature": 0,
            "max_output_tokens": self.rng.randint(1, self.max_output_tokens),
            **fields,
        }

    async def _long_task(self, client: httpx.AsyncClient) -> None:
        """A task long enough to be cut mid-stream by the kill."""
        await self._task(client, tokens=LONG_TASK_TOKENS)

    async def _task(self, client: httpx.AsyncClient, tokens: int | None = None) -> None:
        """Create a task under a key (retried at once, sometimes), follow it, resume once."""
        request = self._request()
        if tokens is not None:
            request["max_output_tokens"] = tokens
        key, keyed = self._key("/tasks", {"type": "response", "request": request})
        keyed.body["request"]["metadata"] = {"key": key}
        for _ in range(self.rng.choice((1, 1, 2))):
            self.figures.requests += 1
            reply = await client.post("/tasks", json=keyed.body, headers={"Idempotency-Key": key})
            if reply.status_code != 202:
                raise Violation(f"POST /tasks → {reply.status_code} {reply.text}")
            task = reply.json()
            if keyed.answer is not None and keyed.answer["id"] != task["id"]:
                raise Violation(f"key {key} gave two tasks")
            keyed.status, keyed.answer = 202, task
        assert keyed.answer is not None
        await self._follow(client, keyed.answer["id"], resume=self.rng.random() < 0.5)

    async def _follow(self, client: httpx.AsyncClient, task_id: str, *, resume: bool) -> None:
        seen = self.task_events.setdefault(task_id, {})
        cursor, stop_after = 0, self.rng.randint(1, 4) if resume else None
        for _ in range(2):
            self.figures.requests += 1
            headers = {"Last-Event-ID": str(cursor)}
            async with client.stream("GET", f"/tasks/{task_id}/events", headers=headers) as r:
                if r.status_code != 200:
                    raise Violation(f"events of {task_id} → {r.status_code}")
                async for event in sse_events(r):
                    if event.event == "error":  # not stored; its id is the last stored one
                        return
                    self._saw(seen, task_id, event)
                    if event.event == "response.output_text.delta":
                        self._streaming.set()
                    cursor = max(cursor, event.id)
                    if event.event in FINAL:
                        return
                    if stop_after is not None and event.id >= stop_after:
                        break  # a client that drops and reconnects with its last id
            stop_after = None

    def _saw(self, seen: dict[int, Received], task_id: str, event: Received) -> None:
        before = seen.get(event.id)
        if before is not None and before != event:
            raise Violation(f"{task_id} event {event.id} sent twice, differently")
        seen[event.id] = event

    async def _stream(self, client: httpx.AsyncClient) -> None:
        """A direct stream under a key, sometimes stored."""
        body = self._request(stream=True, store=self.rng.random() < 0.5)
        key, keyed = self._key("/responses", body)
        await self._post_stream(client, key, keyed)

    async def _post_stream(self, client: httpx.AsyncClient, key: str, keyed: Keyed) -> None:
        self.figures.requests += 1
        headers = {"Idempotency-Key": key}
        async with client.stream("POST", "/responses", json=keyed.body, headers=headers) as r:
            if r.status_code != 200:
                raise Violation(f"stream {key} → {r.status_code}")
            keyed.status = 200
            async for event in sse_events(r):
                keyed.events.append(event)
        if keyed.stream_finished and keyed.body.get("store") and _completed(keyed.events):
            self.stored[keyed.events[0].data["response_id"]] = {}

    async def _conversation(self, client: httpx.AsyncClient) -> None:
        """A stored turn, then its continuation (streamed or not) under keys of their own."""
        first_key, first = self._key("/responses", self._request(store=True))
        self.figures.requests += 1
        reply = await client.post(
            "/responses", json=first.body, headers={"Idempotency-Key": first_key}
        )
        if reply.status_code != 200:
            raise Violation(f"stored turn → {reply.status_code} {reply.text}")
        first.status, first.answer = 200, reply.json()
        self.stored[reply.json()["id"]] = reply.json()
        stream = self.rng.random() < 0.5
        body = self._request(store=True, stream=stream, previous_response_id=reply.json()["id"])
        key, keyed = self._key("/responses", body)
        if stream:
            await self._post_stream(client, key, keyed)
            return
        self.figures.requests += 1
        reply = await client.post("/responses", json=body, headers={"Idempotency-Key": key})
        if reply.status_code != 200:
            raise Violation(f"continued turn → {reply.status_code} {reply.text}")
        keyed.status, keyed.answer = 200, reply.json()
        self.stored[reply.json()["id"]] = reply.json()

    async def _models(self, client: httpx.AsyncClient) -> None:
        self.figures.requests += 1
        reply = await client.get("/models")
        if reply.status_code != 200:
            raise Violation(f"GET /models → {reply.status_code}")

    # --- the invariants --------------------------------------------------------------------------

    async def _check(self) -> None:
        async with self._client() as client:
            await self._check_tasks(client)
            await self._check_stored(client)
            await self._check_keys(client)

    async def _check_tasks(self, client: httpx.AsyncClient) -> None:
        """Every task is final with one final event, ids from 1 without a gap, and replays every
        event any client received, the same; no key made two tasks."""
        rows = [
            (row["id"], json.loads(row["metadata"]).get("key"))
            for row in self._rows("SELECT id, metadata FROM tasks ORDER BY created_at, id")
        ]
        self.figures.tasks = len(rows)
        ended = self._rows("SELECT id FROM tasks WHERE error LIKE '%service_restarted%'")
        self.figures.restarted = len(ended)
        per_key: dict[str, list[str]] = {}
        for task_id, key in rows:
            per_key.setdefault(key, []).append(task_id)
        for key, task_ids in per_key.items():
            if key is not None and len(task_ids) > 1:
                raise Violation(f"key {key} has {len(task_ids)} tasks: {task_ids}")
        for task_id, _ in rows:
            task = (await client.get(f"/tasks/{task_id}")).json()
            if task["status"] in ("queued", "in_progress"):
                raise Violation(f"{task_id} is {task['status']} after the restart")
            async with client.stream("GET", f"/tasks/{task_id}/events") as r:
                replayed = [event async for event in sse_events(r)]
            ids = [event.id for event in replayed]
            if ids != list(range(1, len(ids) + 1)):
                raise Violation(f"{task_id} event ids {ids}")
            finals = [event.id for event in replayed if event.event in FINAL]
            if finals != [len(ids)] or task["last_event_id"] != len(ids):
                raise Violation(f"{task_id}: final events at {finals} of {len(ids)}")
            for event_id, seen in self.task_events.get(task_id, {}).items():
                if event_id > len(replayed) or replayed[event_id - 1] != seen:
                    raise Violation(f"{task_id} lost or changed event {event_id}")
                self.figures.checks.events += 1
            self.figures.checks.tasks += 1

    async def _check_stored(self, client: httpx.AsyncClient) -> None:
        """Every stored response a client was given is there, the same."""
        for response_id, given in self.stored.items():
            reply = await client.get(f"/responses/{response_id}")
            if reply.status_code != 200:
                raise Violation(f"stored {response_id} → {reply.status_code}")
            if given and reply.json()["output"] != given["output"]:
                raise Violation(f"stored {response_id} changed")
            self.figures.checks.stored += 1

    async def _check_keys(self, client: httpx.AsyncClient) -> None:
        """No key is stuck: each key of the round just killed works again with its body, and
        gives back the answer its client was given (a stream its client got whole)."""
        keys, self._fresh_keys = self._fresh_keys, []
        tasks_of = {
            json.loads(row["metadata"]).get("key"): row["id"]
            for row in self._rows("SELECT id, metadata FROM tasks")
        }
        await asyncio.gather(*(self._retry(client, key, tasks_of.get(key)) for key in keys))
        self.figures.checks.keys += len(keys)

    async def _retry(self, client: httpx.AsyncClient, key: str, stored: str | None) -> None:
        keyed = self.keyed[key]
        headers = {"Idempotency-Key": key}
        if keyed.path == "/tasks":
            reply = await client.post("/tasks", json=keyed.body, headers=headers)
            if reply.status_code != 202:
                raise Violation(f"task key {key} → {reply.status_code} {reply.text}")
            if stored is not None and reply.json()["id"] != stored:
                raise Violation(f"task key {key} made a second task")
            if keyed.answer is not None and reply.json()["id"] != keyed.answer["id"]:
                raise Violation(f"task key {key} forgot the task its client was given")
            keyed.answer = reply.json()
        elif keyed.body.get("stream"):
            async with client.stream("POST", "/responses", json=keyed.body, headers=headers) as r:
                if r.status_code != 200:
                    raise Violation(f"stream key {key} → {r.status_code}")
                replayed = r.headers.get("idempotent-replayed") == "true"
                events = [event async for event in sse_events(r)]
            finished = keyed.stream_finished and _completed(keyed.events)
            if finished and (not replayed or events != keyed.events):
                raise Violation(f"stream key {key} lost the stream its client got")
        else:
            reply = await client.post("/responses", json=keyed.body, headers=headers)
            if reply.status_code != 200:
                raise Violation(f"key {key} → {reply.status_code} {reply.text}")
            if keyed.answer is not None and reply.json() != keyed.answer:
                raise Violation(f"key {key} forgot the answer its client was given")


def _completed(events: list[Received]) -> bool:
    """A stream that ended as an answer (completed or incomplete), which its key keeps."""
    return events[-1].event in ("response.completed", "response.incomplete")
