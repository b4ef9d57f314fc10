"""The live half of ``replay.py``: one task of the bundled model and its followers.

Half the followers connect at once, half join while it runs with an ``?after=`` or
``Last-Event-ID`` cursor; each must receive exactly the stored events after its cursor, in
order, ending with the final one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks.harness.meters import PhaseCost, PhaseMeter
from benchmarks.harness.server import Server
from benchmarks.harness.sse import aiter_events, parse_events
from benchmarks.replay_stored import check_sequence
from lmsp_jupyter.client import ServerSentEvent
from lmsp_jupyter.protocol.tasks import FINAL_TASK_STATUSES

TASK_TIMEOUT_S = 600.0
SLOW_POLL_S = 0.5
WATCH_GRACE_S = 2.0


@dataclass(frozen=True)
class Plan:
    """How one follower joins: after ``delay_s``, with which cursor.

    ``cursor``: ``none`` (no cursor: replay from 1), ``zero`` (``?after=0``), ``half``
    (``?after=`` half the task's last event id when it joins), ``header`` (``Last-Event-ID``
    with the task's last event id when it joins: live only) or ``final`` (``?after=`` the
    fixed ``after``: the watcher that sees only the final event of the 0-follower run).
    """

    index: int
    delay_s: float
    cursor: str
    after: int = 0


def follower_plans(count: int, spread_s: float) -> list[Plan]:
    """Half join at once (no cursor or ``after=0``), half over ``spread_s`` with cursors."""
    late = count // 2
    plans = [Plan(i, 0.0, "none" if i % 2 else "zero") for i in range(count - late)]
    kinds = ("zero", "half", "header")
    for number in range(late):
        delay = spread_s * (number + 1) / (late + 1)
        plans.append(Plan(count - late + number, delay, kinds[number % len(kinds)]))
    return plans


@dataclass
class Followed:
    """What one follower received, with times in seconds after the task's creation began."""

    plan: Plan
    cursor: int = 0
    joined_s: float = 0.0
    live_at_join: bool = True
    events: list[ServerSentEvent] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    error: str | None = None

    def time_of(self, name: str) -> float | None:
        """When the first event named ``name`` arrived."""
        return next(
            (t for e, t in zip(self.events, self.times, strict=True) if e.event == name), None
        )


async def get_task(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    """``GET /lmsp/v1/tasks/{id}``."""
    response = await client.get(f"/lmsp/v1/tasks/{task_id}")
    response.raise_for_status()
    task: dict[str, Any] = response.json()
    return task


async def join(client: httpx.AsyncClient, task_id: str, followed: Followed) -> httpx.Request:
    """Choose the cursor as planned and build the events request."""
    params: dict[str, str] = {}
    headers: dict[str, str] = {}
    kind = followed.plan.cursor
    followed.cursor = followed.plan.after
    if followed.plan.delay_s:
        task = await get_task(client, task_id)
        followed.live_at_join = task["status"] not in FINAL_TASK_STATUSES
        followed.cursor = task["last_event_id"] // 2 if kind == "half" else 0
        if kind == "header":
            followed.cursor = task["last_event_id"]
    if kind == "header":
        headers["Last-Event-ID"] = str(followed.cursor)
    elif kind != "none":
        params["after"] = str(followed.cursor)
    return client.build_request(
        "GET", f"/lmsp/v1/tasks/{task_id}/events", params=params, headers=headers
    )


async def follow(client: httpx.AsyncClient, task_id: str, plan: Plan, origin: float) -> Followed:
    """One follower: wait, join, read events until the stream closes."""
    followed = Followed(plan)
    await asyncio.sleep(plan.delay_s)
    try:
        request = await join(client, task_id, followed)
        followed.joined_s = time.perf_counter() - origin
        response = await client.send(request, stream=True)
        try:
            response.raise_for_status()
            async for event in aiter_events(response):
                followed.events.append(event)
                followed.times.append(time.perf_counter() - origin)
        finally:
            await response.aclose()
    except (httpx.HTTPError, KeyError, ValueError) as error:
        followed.error = f"{type(error).__name__}: {error}"
    return followed


async def create_task(client: httpx.AsyncClient, request: dict[str, Any]) -> str:
    """``POST /lmsp/v1/tasks``; returns the task id."""
    response = await client.post("/lmsp/v1/tasks", json={"type": "response", "request": request})
    response.raise_for_status()
    task_id: str = response.json()["id"]
    return task_id


async def poll_until_final(
    client: httpx.AsyncClient, task_id: str, origin: float, interval_s: float
) -> float:
    """Poll the task until its status is final; seconds after ``origin`` when seen."""
    deadline = time.perf_counter() + TASK_TIMEOUT_S
    while time.perf_counter() < deadline:
        if (await get_task(client, task_id))["status"] in FINAL_TASK_STATUSES:
            return time.perf_counter() - origin
        await asyncio.sleep(interval_s)
    raise RuntimeError(f"task {task_id} did not end within {TASK_TIMEOUT_S:.0f} s")


async def stored_stream(client: httpx.AsyncClient, task_id: str) -> list[ServerSentEvent]:
    """The finished task's whole event stream, as stored (the reference for every follower)."""
    response = await client.get(f"/lmsp/v1/tasks/{task_id}/events")
    response.raise_for_status()
    return parse_events(response.content)


@dataclass
class LiveRun:
    """One task of the bundled model and what its followers saw."""

    followers: int
    task: dict[str, Any]
    reference: list[ServerSentEvent]
    followed: list[Followed]
    end_s: float
    usage: PhaseCost
    failures: list[str]

    @property
    def output_tokens(self) -> int:
        """Tokens the task generated (its result's usage)."""
        result = self.task.get("result") or {}
        return int((result.get("usage") or {}).get("output_tokens", 0))

    @property
    def ok(self) -> int:
        """Followers that received everything after their cursor, once, in order."""
        return sum(not self.failures_of(f) for f in self.followed)

    def failures_of(self, followed: Followed) -> list[str]:
        """FAIL lines of one follower; none if it got every event after its cursor."""
        plan = followed.plan
        who = f"follower {plan.index} ({plan.cursor}, cursor {followed.cursor})"
        if followed.error is not None:
            return [f"FAIL {who}: {followed.error}"]
        return check_sequence(followed.events, self.reference[followed.cursor :], who)

    def check(self) -> list[str]:
        """FAIL lines of every follower that did not get what it should have."""
        return [line for f in self.followed for line in self.failures_of(f)]


def client_for(server: Server, connections: int) -> httpx.AsyncClient:
    """An async client with a connection for every follower."""
    limits = httpx.Limits(max_connections=connections + 8, max_keepalive_connections=connections)
    return httpx.AsyncClient(
        base_url=server.base_url, headers=server.headers, timeout=TASK_TIMEOUT_S, limits=limits
    )


async def watch_final(
    client: httpx.AsyncClient, task_id: str, final_id: int, origin: float
) -> tuple[list[Followed], float]:
    """Follow with ``after`` = ``final_id`` - 1, so only the final event is sent.

    A slow poll of the task races it: should the watcher not get the final event within
    ``WATCH_GRACE_S`` of the task's end, it is cut off and the poll's time is used.
    """
    plan = Plan(0, 0.0, "final", after=final_id - 1)
    watcher = asyncio.create_task(follow(client, task_id, plan, origin))
    poll = asyncio.create_task(poll_until_final(client, task_id, origin, SLOW_POLL_S))
    await asyncio.wait({watcher, poll}, return_when=asyncio.FIRST_COMPLETED)
    done, _ = await asyncio.wait({watcher}, timeout=WATCH_GRACE_S)
    poll.cancel()
    if done:
        followed = watcher.result()
        return [followed], followed.times[-1] if followed.times else float("nan")
    watcher.cancel()
    followed = Followed(plan, cursor=plan.after, error="no final event: cut off after the end")
    return [followed], await poll


async def follow_all(
    client: httpx.AsyncClient, task_id: str, plans: list[Plan], origin: float
) -> tuple[list[Followed], float]:
    """Every planned follower at once; the end is when the first got the final event."""
    followed = list(await asyncio.gather(*(follow(client, task_id, p, origin) for p in plans)))
    return followed, min((f.times[-1] for f in followed if f.times), default=float("nan"))


async def live_run(
    server: Server, request: dict[str, Any], followers: int, spread_s: float, final_id: int
) -> LiveRun:
    """Create the task, follow it with ``followers`` clients, check what each received.

    With 0 followers a watcher gets only the final event (``final_id`` from an earlier run of
    the same request); with ``final_id`` 0 too (the warm-up) the task is polled.
    """
    plans = follower_plans(followers, spread_s)
    async with client_for(server, followers) as client:
        with PhaseMeter(server.pid) as meter:
            origin = time.perf_counter()
            task_id = await create_task(client, request)
            if followers:
                followed, end_s = await follow_all(client, task_id, plans, origin)
            elif final_id:
                followed, end_s = await watch_final(client, task_id, final_id, origin)
            else:
                followed, end_s = [], await poll_until_final(client, task_id, origin, SLOW_POLL_S)
        task = await get_task(client, task_id)
        reference = await stored_stream(client, task_id)
    run = LiveRun(followers, task, reference, followed, end_s, meter.usage, [])
    run.failures = run.check()
    return run
