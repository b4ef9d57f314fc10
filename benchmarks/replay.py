"""Task event replay and fan-out of the LMSP service (LMSP 1.0 sections 6.4 and 7).

Two measurements on a ``jupyter lmsp`` server that this script starts as a subprocess (and
always stops):

* stored replay: before the server starts, a finished task of ``--events`` events (10,000 by
  default) is written into a fresh store with the service's own ``TaskRecords``; then
  ``GET /lmsp/v1/tasks/{id}/events`` reads the whole SSE stream ``--replay-runs`` times.
  Reported: events/s and MB/s (median), time to the first byte; every run must carry the ids
  1..N once each, in order, with the stored names and data.
* live fan-out: one task of the bundled model followed by ``--followers`` concurrent clients,
  half from the start and half joining while it runs, some with an ``?after=`` or
  ``Last-Event-ID`` cursor. Every follower must get every event after its cursor exactly once,
  in order, identical to the stored events, ending with the final one. The same request runs
  first with 0 followers (its end seen by polling the task) and with 1 follower, so the token
  rates compare. Reported: tokens/s from creation to the final event, decode tokens/s, the
  server's CPU time, resident memory (before, sampled peak, ``VmHWM``, after) and the client's
  own CPU time.

It measures and never asserts: broken invariants print ``FAIL`` lines, and the exit code is 0
whatever the numbers (1 only if it could not run).

Run: ``.venv/bin/python benchmarks/replay.py [--events 10000] [--followers 100]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pstats
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID
from lmsp_jupyter.protocol.events import (
    EVENT_NAMES,
    FINAL_EVENTS,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    ResponseCompleted,
    ResponseCreated,
)
from lmsp_jupyter.protocol.ids import new_id
from lmsp_jupyter.protocol.items import OutputMessage, OutputText
from lmsp_jupyter.protocol.requests import parse_response_request
from lmsp_jupyter.protocol.responses import Response, Usage
from lmsp_jupyter.protocol.tasks import FINAL_TASK_STATUSES
from lmsp_jupyter.service.responses import OWNER
from lmsp_jupyter.service.store import FinalState, Store, StoredEvent, TaskRecords, now

STARTUP_TIMEOUT_S = 120.0
TASK_TIMEOUT_S = 600.0
SLOW_POLL_S = 0.5
WATCH_GRACE_S = 2.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WORDS = (" The", " keeper", " climbed", " the", " tower", ",", " and", " the", " lamp", ".")
DEFAULT_PROMPT = "Write a long story."
MB = 1_000_000
#: Runs ``jupyter-lmsp`` (argv[2]) under cProfile counting the CPU time of the main thread
#: (the event loop) only, not wall time, so the preemptions of a busy machine do not count.
PROFILER = """
import cProfile, runpy, sys, time
out, script = sys.argv[1:3]
sys.argv = sys.argv[2:]
profile = cProfile.Profile(time.thread_time)
try:
    profile.runcall(runpy.run_path, script, run_name="__main__")
except SystemExit:
    pass
finally:
    profile.dump_stats(out)
"""


# --- the server ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """A running ``jupyter lmsp``: where it answers, its token and its process id."""

    base_url: str
    token: str
    pid: int

    @property
    def headers(self) -> dict[str, str]:
        """The Jupyter token as a bearer token: its requests are owned by ``jupyter``."""
        return {"Authorization": f"Bearer {self.token}"}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_command(
    port: int,
    token: str,
    root: Path,
    store_path: Path,
    profile: Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``jupyter lmsp`` on ``store_path``, with no model stores but the bundled model.

    With ``profile``, under cProfile (its main thread: the event loop), stats saved there.
    """
    script = Path(sys.executable).with_name("jupyter-lmsp")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "jupyter", "lmsp"]
    if profile is not None:
        if not script.exists():
            raise RuntimeError(f"--profile-server needs {script}")
        command = [sys.executable, "-c", PROFILER, str(profile), str(script)]
    command += [
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        f"--LmspApp.store_path={store_path}",
        "--LmspApp.ollama_dir=",
        "--LmspApp.huggingface_cache_dir=",
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")
    return [*command, *extra]


@contextlib.contextmanager
def running_server(
    root: Path,
    store_path: Path,
    log_path: Path,
    profile: Path | None = None,
    extra: Sequence[str] = (),
) -> Iterator[Server]:
    """Start ``jupyter lmsp``, yield it once it answers, and stop it whatever happens."""
    port, token = free_port(), secrets.token_hex(16)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            server_command(port, token, root, store_path, profile, extra),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches only this script, which then stops it
        )
        try:
            server = Server(f"http://127.0.0.1:{port}", token, process.pid)
            wait_until_ready(server, process)
            yield server
        finally:
            stop(process)


def wait_until_ready(server: Server, process: subprocess.Popen[bytes]) -> None:
    """Poll ``GET /lmsp/v1`` until it answers 200; fail if the server exits or never does."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode}")
        with contextlib.suppress(httpx.TransportError):
            answer = httpx.get(f"{server.base_url}/lmsp/v1", headers=server.headers, timeout=2)
            if answer.status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the server did not answer within {STARTUP_TIMEOUT_S:.0f} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if the server lingers."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# --- the server's memory and CPU ---------------------------------------------------------------


def proc_status_kb(pid: int, key: str) -> int:
    """One ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``); 0 if unreadable."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    return 0


def reset_peak_rss(pid: int) -> bool:
    """Reset ``VmHWM`` to the current RSS (``clear_refs`` 5); False where that is refused."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (llama.cpp's included)."""
    return _stat_cpu_s(Path(f"/proc/{pid}/stat"))


def main_thread_cpu_s(pid: int) -> float:
    """CPU seconds of a process's main thread: the server's event loop (tornado/asyncio)."""
    return _stat_cpu_s(Path(f"/proc/{pid}/task/{pid}/stat"))


def _stat_cpu_s(path: Path) -> float:
    try:
        fields = path.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (``/proc/stat``)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS


def client_cpu_s() -> float:
    """User + system CPU seconds of this benchmark process."""
    times = os.times()
    return times.user + times.system


class RssSampler:
    """Samples the server's ``VmRSS`` on a thread, to see the peak of one phase."""

    def __init__(self, pid: int, interval_s: float = 0.02) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, proc_status_kb(self.pid, "VmRSS"))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class PhaseCost:
    """What one phase cost: server memory and CPU, client CPU, other processes' CPU."""

    rss_before_kb: int = 0
    rss_peak_kb: int = 0
    hwm_kb: int = 0
    hwm_reset: bool = False
    rss_after_kb: int = 0
    server_cpu_s: float = 0.0
    loop_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    others_cpu_s: float = 0.0
    wall_s: float = 0.0


class Meter:
    """Measures one phase: ``with Meter(pid) as meter: ...``, then read ``meter.usage``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.usage = PhaseCost()
        self._sampler = RssSampler(pid)
        self._start: tuple[float, ...] = ()

    def __enter__(self) -> Meter:
        self.usage.hwm_reset = reset_peak_rss(self.pid)
        self.usage.rss_before_kb = proc_status_kb(self.pid, "VmRSS")
        self._start = self._counters()
        self._sampler.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sampler.__exit__()
        deltas = (b - a for a, b in zip(self._start, self._counters(), strict=True))
        busy, server, loop, client, wall = deltas
        usage = self.usage
        usage.rss_peak_kb = self._sampler.peak_kb
        usage.hwm_kb = proc_status_kb(self.pid, "VmHWM")
        usage.rss_after_kb = proc_status_kb(self.pid, "VmRSS")
        usage.server_cpu_s, usage.loop_cpu_s = server, loop
        usage.client_cpu_s, usage.wall_s = client, wall
        usage.others_cpu_s = max(busy - server - client, 0.0)

    def _counters(self) -> tuple[float, ...]:
        pid = self.pid
        server, loop = process_cpu_s(pid), main_thread_cpu_s(pid)
        return machine_busy_s(), server, loop, client_cpu_s(), time.perf_counter()


# --- SSE ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One received SSE event."""

    id: int
    name: str
    data: str


def parse_frame(frame: bytes) -> Event | None:
    """One SSE frame (the lines between blank lines); None for comments and ``retry``."""
    event_id, name, data = None, "message", ""
    for line in frame.decode().split("\n"):
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "id":
            event_id = int(value)
        elif key == "event":
            name = value
        elif key == "data":
            data = value
    return None if event_id is None else Event(event_id, name, data)


class SseParser:
    """Splits a byte stream into events as it arrives."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[Event]:
        """The events completed by ``chunk``."""
        *frames, self._buffer = (self._buffer + chunk).split(b"\n\n")
        return [event for frame in frames if (event := parse_frame(frame)) is not None]


def check_sequence(events: Sequence[Event], expected: Sequence[Event], who: str) -> list[str]:
    """FAIL lines unless ``events`` equals ``expected``: same ids, names and data, in order."""
    ids = [event.id for event in events]
    want = [event.id for event in expected]
    if ids != want:
        missing, extra = sorted(set(want) - set(ids)), len(ids) - len(set(ids))
        return [
            f"FAIL {who}: {len(ids)} events, ids {_span(ids)}, expected {_span(want)}; "
            f"missing {len(missing)} (first {missing[:3]}), duplicates {extra}"
        ]
    changed = [got.id for got, ref in zip(events, expected, strict=True) if got != ref]
    if changed:
        return [f"FAIL {who}: {len(changed)} events differ from the stored ones: {changed[:5]}"]
    if expected and expected[-1].name not in FINAL_EVENTS:
        return [f"FAIL {who}: the stream did not end with a final event ({expected[-1].name})"]
    return []


def _span(ids: Sequence[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if ids else "none"


# --- 1. replay of a stored task -----------------------------------------------------------------


def stored_task_events(response_id: str, message_id: str, total: int) -> list[StoredEvent]:
    """A completed response of ``total`` events: created, item added, deltas, done, completed."""
    deltas = [WORDS[index % len(WORDS)] for index in range(total - 4)]
    text = "".join(deltas)
    usage = Usage(input_tokens=12, output_tokens=len(deltas), total_tokens=12 + len(deltas))
    data = [
        ResponseCreated(response_id=response_id),
        OutputItemAdded(response_id=response_id, output_index=0, item=OutputMessage(id=message_id)),
        *(OutputTextDelta(response_id=response_id, item_id=message_id, delta=d) for d in deltas),
        OutputItemDone(
            response_id=response_id,
            output_index=0,
            item=OutputMessage(id=message_id, content=[OutputText(text=text)]),
        ),
        ResponseCompleted(response_id=response_id, usage=usage),
    ]
    return [
        StoredEvent(number, EVENT_NAMES[type(item)], item.model_dump_json())
        for number, item in enumerate(data, start=1)
    ]


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
    events: list[Event]
    fill_s: float


def fill_store(path: Path, total: int) -> StoredTask:
    """Write one finished task of ``total`` events, one ``append`` (transaction) per event."""
    task_id, response_id, message_id = new_id("task"), new_id("resp"), new_id("msg")
    events = stored_task_events(response_id, message_id, total)
    request = parse_response_request({"model": BUNDLED_MODEL_ID, "input": DEFAULT_PROMPT})
    store = Store(path)
    records = TaskRecords(store)
    start, at = time.perf_counter(), now()
    records.insert(
        task_id=task_id,
        owner=OWNER,
        model=BUNDLED_MODEL_ID,
        response_id=response_id,
        request=request.model_dump_json(by_alias=True, exclude_none=True),
        at=at,
    )
    records.started(task_id, at)
    for event in events[:-1]:
        records.append(task_id, event)
    records.append(task_id, events[-1], final_state(response_id, events, now()))
    fill_s = time.perf_counter() - start
    store.close()
    expected = [Event(e.id, e.event, e.data) for e in events]
    return StoredTask(task_id, expected, fill_s)


@dataclass(frozen=True)
class ReplayRun:
    """One full read of the stored task's event stream."""

    seconds: float
    first_byte_s: float
    size: int
    events: list[Event]

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
    parser = SseParser()
    events = parser.feed(body + b"\n\n")
    return ReplayRun(seconds, first, len(body), events)


def replay_phase(
    server: Server, stored: StoredTask, runs: int
) -> tuple[list[ReplayRun], PhaseCost]:
    """``runs`` sequential replays of the stored task, each checked against what was stored."""
    with (
        httpx.Client(base_url=server.base_url, headers=server.headers, timeout=120) as client,
        Meter(server.pid) as meter,
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


# --- 2. followers of a live task ----------------------------------------------------------------


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
    events: list[Event] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    error: str | None = None

    def time_of(self, name: str) -> float | None:
        """When the first event named ``name`` arrived."""
        return next(
            (t for e, t in zip(self.events, self.times, strict=True) if e.name == name), None
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
            parser = SseParser()
            async for chunk in response.aiter_raw():
                for event in parser.feed(chunk):
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


async def stored_stream(client: httpx.AsyncClient, task_id: str) -> list[Event]:
    """The finished task's whole event stream, as stored (the reference for every follower)."""
    response = await client.get(f"/lmsp/v1/tasks/{task_id}/events")
    response.raise_for_status()
    return SseParser().feed(response.content + b"\n\n")


@dataclass
class LiveRun:
    """One task of the bundled model and what its followers saw."""

    followers: int
    task: dict[str, Any]
    reference: list[Event]
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
        with Meter(server.pid) as meter:
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


# --- report -------------------------------------------------------------------------------------


def num(value: float, spec: str) -> str:
    """``value`` formatted, or ``-`` when it was not measured (NaN)."""
    return "-" if value != value else format(value, spec)


def mb(kb: int) -> str:
    """kB as MiB with one decimal."""
    return f"{kb / 1024:.1f}"


def print_replay(stored: StoredTask, runs: list[ReplayRun], usage: PhaseCost) -> None:
    """The stored replay table."""
    rates = [run.events_per_s for run in runs]
    total = sum(len(run.events) for run in runs)
    print(
        f"\nstored replay: {len(stored.events)} events, {runs[0].size / MB:.2f} MB of SSE, "
        f"{len(runs)} runs (store filled in {stored.fill_s:.1f} s)"
    )
    print(
        f"  events/s   median {statistics.median(rates):8.0f}   min {min(rates):8.0f}"
        f"   max {max(rates):8.0f}"
    )
    print(f"  MB/s       median {statistics.median(r.mb_per_s for r in runs):8.2f}")
    print(f"  first byte median {statistics.median(r.first_byte_s for r in runs) * 1000:8.1f} ms")
    print(
        f"  server RSS {mb(usage.rss_before_kb)} -> peak {mb(usage.rss_peak_kb)} "
        f"(VmHWM {mb(usage.hwm_kb)}{'' if usage.hwm_reset else ', not reset'}) "
        f"-> {mb(usage.rss_after_kb)} MiB"
    )
    print(
        f"  CPU over {usage.wall_s:.2f} s: server {usage.server_cpu_s:.2f} s (event loop "
        f"{usage.loop_cpu_s:.2f} s = {usage.loop_cpu_s / total * 1e6:.0f} us/event), "
        f"client {usage.client_cpu_s:.2f} s, other processes {usage.others_cpu_s:.2f} s"
    )


def rates(run: LiveRun) -> tuple[float, float]:
    """(tokens/s creation to final event, decode tokens/s first delta to final) of a run."""
    e2e = run.output_tokens / run.end_s if run.end_s else float("nan")
    firsts = [t for f in run.followed if (t := f.time_of("response.output_text.delta"))]
    if not firsts or run.output_tokens < 2:
        return e2e, float("nan")
    return e2e, (run.output_tokens - 1) / (run.end_s - min(firsts))


def fan_out_ms(run: LiveRun) -> float:
    """How long after the first follower the last one connected by then got the final event."""
    finals = [f.times[-1] for f in run.followed if f.times and f.joined_s < run.end_s]
    return (max(finals) - run.end_s) * 1000 if finals else float("nan")


def others_share(usage: PhaseCost) -> float:
    """CPU other processes took during a run, as a share of the whole machine."""
    return usage.others_cpu_s / (usage.wall_s * (os.cpu_count() or 1))


def med(runs: Sequence[LiveRun], metric: Callable[[LiveRun], float]) -> float:
    """The median of ``metric`` over ``runs``."""
    return statistics.median(metric(run) for run in runs)


def by_count(runs: Sequence[LiveRun]) -> dict[int, list[LiveRun]]:
    """The runs grouped by their number of followers, in increasing order."""
    groups: dict[int, list[LiveRun]] = {}
    for run in sorted(runs, key=lambda r: r.followers):
        groups.setdefault(run.followers, []).append(run)
    return groups


def progress_line(run: LiveRun) -> str:
    """One run as it ends."""
    e2e, decode = rates(run)
    return (
        f"{run.followers:>3} followers: {run.ok}/{len(run.followed)} ok, "
        f"{run.output_tokens} tokens, final after {run.end_s:5.2f} s, {e2e:5.1f} tok/s "
        f"(decode {num(decode, '5.1f')}), "
        f"other processes {others_share(run.usage):4.0%} of the CPUs"
    )


def print_live(runs: list[LiveRun]) -> None:
    """The live fan-out tables (medians over the rounds): timing, then resources."""
    groups = by_count(runs)
    base = med(groups[0], lambda r: rates(r)[0])
    rounds = len(groups[0])
    print(f"\nlive task ({BUNDLED_MODEL_ID}), median of {rounds} round(s)")
    print(
        f"{'followers':>9} {'all ok':>8} {'tokens':>6} {'final s':>8} {'tok/s':>7} {'vs 0':>6}"
        f" {'decode':>7} {'fan-out ms':>10} {'others':>7}"
    )
    for count, group in groups.items():
        ok = f"{sum(r.ok for r in group)}/{sum(len(r.followed) for r in group)}"
        e2e = med(group, lambda r: rates(r)[0])
        print(
            f"{count if count else '0*':>9} {ok:>8} {med(group, lambda r: r.output_tokens):>6.0f}"
            f" {med(group, lambda r: r.end_s):>8.2f} {e2e:>7.1f} {e2e / base:>6.3f}"
            f" {num(med(group, lambda r: rates(r)[1]), '.1f'):>7}"
            f" {num(med(group, fan_out_ms), '.0f'):>10}"
            f" {med(group, lambda r: others_share(r.usage)):>7.0%}"
        )
    print("  tok/s = output tokens / (task creation to the final event at the first follower);")
    print("  decode = (tokens - 1) / (first delta to final event); fan-out = final event at the")
    print("  last follower minus at the first; others = other processes' share of the CPUs.")
    print("  * 0 followers: one watcher with ?after=<final id - 1> receives only the final event.")
    print_resources(groups)


def print_resources(groups: dict[int, list[LiveRun]]) -> None:
    """Server memory (worst round) and CPU (median) per follower count."""
    print(
        f"\n{'followers':>9} {'RSS before':>10} {'peak':>7} {'VmHWM':>7} {'after':>7}"
        f" {'growth':>7} {'srv CPU s':>9} {'loop CPU s':>10} {'cli CPU s':>9} {'wall s':>7}"
    )
    for count, group in groups.items():
        worst = max(group, key=lambda r: r.usage.rss_peak_kb - r.usage.rss_before_kb).usage
        print(
            f"{count if count else '0*':>9} {mb(worst.rss_before_kb):>10}"
            f" {mb(worst.rss_peak_kb):>7} {mb(worst.hwm_kb):>7} {mb(worst.rss_after_kb):>7}"
            f" {mb(worst.rss_peak_kb - worst.rss_before_kb):>7}"
            f" {med(group, lambda r: r.usage.server_cpu_s):>9.2f}"
            f" {med(group, lambda r: r.usage.loop_cpu_s):>10.2f}"
            f" {med(group, lambda r: r.usage.client_cpu_s):>9.2f}"
            f" {med(group, lambda r: r.usage.wall_s):>7.2f}"
        )
    print("  MiB, the round with the largest growth; RSS sampled every 20 ms, VmHWM reset")
    print("  before each run. CPU: medians; srv = all server threads (llama.cpp's included),")
    print("  loop = its event-loop thread, cli = this benchmark process.")


def print_joins(run: LiveRun) -> None:
    """Per join kind: followers, how many ok, joined while live, events received."""
    print(f"\nfollowers of the {run.followers}-follower run by how they joined:")
    for kind in ("none", "zero", "half", "header"):
        group = [f for f in run.followed if f.plan.cursor == kind]
        late = [f for f in group if f.plan.delay_s]
        if not group:
            continue
        ok = sum(not run.failures_of(f) for f in group)
        counts = sorted(len(f.events) for f in group)
        print(
            f"  {kind:<6} {len(group):>3} followers ({len(late)} late, "
            f"{sum(f.live_at_join for f in late)} of those joined while it ran): {ok} ok, "
            f"events each {counts[0]}..{counts[-1]}"
        )


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--events", type=int, default=10_000, help="events of the stored task (>= 5)")
    add("--replay-runs", type=int, default=5, help="timed reads of the stored task")
    add("--followers", type=int, default=100, help="concurrent followers of the live task")
    add("--rounds", type=int, default=3, help="rounds of the live runs (0, 1, N followers)")
    add(
        "--max-background",
        type=float,
        default=15.0,
        metavar="PERCENT",
        help="run a live run again when other processes took more than this share of the "
        "machine's CPUs meanwhile (default: 15)",
    )
    add("--retries", type=int, default=2, help="most re-runs of one live run (machine busy)")
    add("--tokens", type=int, default=300, help="max_output_tokens of the live task")
    add("--prompt", default=DEFAULT_PROMPT, help="input of the live task")
    add(
        "--join-spread",
        type=float,
        default=0.8,
        metavar="FRACTION",
        help="late followers join over this fraction of the 0-follower run's duration",
    )
    add("--skip-live", action="store_true", help="only the stored replay")
    add(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for jupyter lmsp, e.g. --server-arg=--LmspApp.threads=1",
    )
    add("--server-log", type=Path, default=None, help="keep the server's output here")
    add(
        "--profile-server",
        type=Path,
        default=None,
        metavar="PATH",
        help="run the server under cProfile (event-loop thread), save the stats to PATH and "
        "print the top functions; slows the server, so its figures are not comparable",
    )
    return parser.parse_args(argv)


def live_phase(server: Server, args: argparse.Namespace) -> list[LiveRun]:
    """Warm-up (loads the model), then rounds of 0, 1 and ``--followers`` followers."""
    request = {
        "model": BUNDLED_MODEL_ID,
        "input": args.prompt,
        "temperature": 0,
        "max_output_tokens": args.tokens,
    }
    print("\nlive task: warm-up (loads the model) ...", flush=True)
    final_id = len(asyncio.run(live_run(server, request, 0, 0.0, 0)).reference)
    runs: list[LiveRun] = []
    for number in range(1, args.rounds + 1):
        print(f"round {number}:", flush=True)
        for count in sorted({0, 1, args.followers}):
            baseline = [r.end_s for r in runs if r.followers == 0]
            spread = args.join_spread * statistics.median(baseline) if baseline else 0.0
            runs.append(quiet_run(server, request, (count, spread, final_id), args))
    return runs


def quiet_run(
    server: Server,
    request: dict[str, Any],
    shape: tuple[int, float, int],
    args: argparse.Namespace,
) -> LiveRun:
    """One live run, run again (up to ``--retries`` times) while other processes were busy."""
    for attempt in range(args.retries + 1):
        run = asyncio.run(live_run(server, request, *shape))
        busy = others_share(run.usage) > args.max_background / 100
        again = busy and attempt < args.retries
        print(f"  {progress_line(run)}{'  (again: machine busy)' if again else ''}", flush=True)
        for line in run.failures:
            print(f"  {line}")
        if not again:
            break
    return run


def benchmark(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
    """Fill the store, start the server, run both measurements, print the tables."""
    print(
        f"cpu_count: {os.cpu_count()}, python {sys.version.split()[0]}, httpx {httpx.__version__}"
    )
    if args.server_arg:
        print(f"server arguments: {' '.join(args.server_arg)}")
    store_path = scratch / "lmsp.sqlite3"
    stored = fill_store(store_path, args.events)
    extra = args.server_arg
    with running_server(scratch, store_path, log_path, args.profile_server, extra) as server:
        print(f"server pid {server.pid}\n\nstored replay of {stored.id}:", flush=True)
        replays, usage = replay_phase(server, stored, args.replay_runs)
        runs = [] if args.skip_live else live_phase(server, args)
    print("\n=== summary ===")
    print_replay(stored, replays, usage)
    if runs:
        print_live(runs)
        print_joins(max(runs, key=lambda run: run.followers))
    if args.profile_server is not None:
        print_profile(args.profile_server)


def print_profile(path: Path, top: int = 25) -> None:
    """The server's functions that took the most time themselves (cProfile ``tottime``)."""
    if not path.exists():
        print(f"\nno profile at {path} (the server did not exit cleanly)")
        return
    print(f"\nserver event-loop profile ({path}), top {top} by own time:")
    pstats.Stats(str(path), stream=sys.stdout).sort_stats("tottime").print_stats(top)


def interrupt(signum: int, frame: object) -> None:
    """A signal that ends the benchmark: as Ctrl-C, so the server is stopped on the way out."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, interrupt)  # so that the server is stopped then too
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        log_path = args.server_log or scratch / "server.log"
        try:
            benchmark(args, scratch, log_path)
        except KeyboardInterrupt:
            print("\ninterrupted", file=sys.stderr)
            return 130
        except (RuntimeError, OSError, httpx.HTTPError) as error:
            print(f"\nbenchmark failed: {error}", file=sys.stderr)
            if log_path.exists():
                print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
