"""Load: many concurrent connections against one server, mixing direct streams, followers of
running tasks and model listings.

The server (``jupyter server`` with the extension, the bundled model loaded first) gets
``--connections`` connections at once: two fifths ``POST /lmsp/v1/responses`` streams, two
fifths followers of ``--tasks`` tasks started just before (``GET /lmsp/v1/tasks/{id}/events``),
the rest ``GET /lmsp/v1/models``. Prints, per kind, the replies by status, how many streams
ended with their final event, and the first-event latency (from sending the request to the
first event, or to the reply of a listing) at p50, p99 and max; then the server's peak
resident memory over the run. A reply ≥ 500 or a stream that does not end is a ``FAIL`` line;
the figures themselves are never judged (exit code 0 whatever they are).

Run: ``.venv/bin/python benchmarks/load.py [--connections 200] [--tokens 16] [--tasks 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

if not __package__:  # run as a file: python benchmarks/load.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.meters import RssSampler, proc_status_kb
from benchmarks.harness.server import running_server
from benchmarks.harness.sse import aiter_events
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID
from lmsp_jupyter.protocol.events import FINAL_EVENTS

KINDS = ("stream", "follower", "models")
PROMPT = "Tell me about the sea."
CLIENT_TIMEOUT_S = 900.0


@dataclass
class Connection:
    """What one connection got: its reply's status, when its first event came, how it ended."""

    kind: str
    status: int | None = None
    first_s: float | None = None
    ended: bool = False
    error: str | None = None


@dataclass
class LoadResult:
    """Every connection of one run."""

    connections: list[Connection] = field(default_factory=list)

    def of(self, kind: str) -> list[Connection]:
        """The connections of one kind."""
        return [c for c in self.connections if c.kind == kind]

    @property
    def server_errors(self) -> list[Connection]:
        """Replies ≥ 500."""
        return [c for c in self.connections if c.status is not None and c.status >= 500]

    @property
    def unended(self) -> list[Connection]:
        """Streams (direct or followed) that did not end with their final event."""
        return [c for c in self.connections if c.kind != "models" and not c.ended]

    def first_event_s(self, kinds: tuple[str, ...] = KINDS) -> list[float]:
        """First-event latencies of the connections of ``kinds`` that got one, sorted."""
        return sorted(c.first_s for c in self.connections if c.kind in kinds and c.first_s)


#: The kinds of five connections in a row: two fifths streams, two fifths followers, a listing.
ROTATION = ("stream", "follower", "stream", "follower", "models")


def mix(connections: int) -> list[str]:
    """The kind of each connection, interleaved so that every kind is in flight at once."""
    return [ROTATION[index % len(ROTATION)] for index in range(connections)]


async def run_load(
    lmsp_url: str, headers: dict[str, str], connections: int, tokens: int, tasks: int
) -> LoadResult:
    """Open ``connections`` connections at once against ``lmsp_url`` (an LMSP base URL)."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(CLIENT_TIMEOUT_S)
    async with httpx.AsyncClient(
        base_url=lmsp_url, headers=headers, limits=limits, timeout=timeout
    ) as client:
        loaded = await client.post(f"/models/{BUNDLED_MODEL_ID}/load")
        loaded.raise_for_status()
        request = {"model": BUNDLED_MODEL_ID, "input": PROMPT, "temperature": 0}
        request["max_output_tokens"] = tokens
        task_ids = []
        for _ in range(tasks):
            reply = await client.post("/tasks", json={"type": "response", "request": request})
            reply.raise_for_status()
            task_ids.append(reply.json()["id"])
        result = LoadResult([Connection(kind) for kind in mix(connections)])
        await asyncio.gather(
            *(
                _connect(client, c, request, task_ids[i % len(task_ids)] if task_ids else None)
                for i, c in enumerate(result.connections)
            )
        )
        return result


async def _connect(
    client: httpx.AsyncClient,
    connection: Connection,
    request: dict[str, object],
    task_id: str | None,
) -> None:
    start = time.perf_counter()
    try:
        if connection.kind == "models":
            reply = await client.get("/models")
            connection.status, connection.first_s = reply.status_code, time.perf_counter() - start
            return
        if connection.kind == "follower" and task_id is None:
            connection.error = "no task to follow"
            return
        call = (
            client.stream("GET", f"/tasks/{task_id}/events")
            if connection.kind == "follower"
            else client.stream("POST", "/responses", json={**request, "stream": True})
        )
        async with call as reply:
            connection.status = reply.status_code
            if reply.status_code != 200:
                await reply.aread()
                return
            async for event in aiter_events(reply):
                if connection.first_s is None:
                    connection.first_s = time.perf_counter() - start
                if event.event in FINAL_EVENTS:
                    connection.ended = True
    except httpx.HTTPError as error:
        connection.error = f"{type(error).__name__}: {error}"


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile of sorted ``values`` (0 when there are none)."""
    if not values:
        return 0.0
    return values[min(len(values) - 1, max(0, round(share * len(values)) - 1))]


def print_result(result: LoadResult, peak_rss_kb: int, hwm_kb: int, wall_s: float) -> None:
    """The table per kind, the latency summary, memory, and a FAIL line per broken rule."""
    print(f"\n{len(result.connections)} connections in {wall_s:.1f} s")
    print(
        f"{'kind':<10}{'count':>6}{'2xx':>6}{'4xx':>6}{'5xx':>6}{'other':>6}{'ended':>7}"
        f"{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
    )
    for kind in KINDS:
        group = result.of(kind)
        statuses = [c.status for c in group]
        latencies = result.first_event_s((kind,))
        ended = "-" if kind == "models" else str(sum(c.ended for c in group))
        print(
            f"{kind:<10}{len(group):>6}"
            f"{sum(s is not None and s < 300 for s in statuses):>6}"
            f"{sum(s is not None and 400 <= s < 500 for s in statuses):>6}"
            f"{sum(s is not None and s >= 500 for s in statuses):>6}"
            f"{sum(s is None for s in statuses):>6}{ended:>7}"
            f"{percentile(latencies, 0.5) * 1000:>9.0f}{percentile(latencies, 0.99) * 1000:>9.0f}"
            f"{(latencies[-1] if latencies else 0) * 1000:>9.0f}"
        )
    streams = result.first_event_s(("stream", "follower"))
    print(
        f"p99 first-event latency, streams and followers: {percentile(streams, 0.99) * 1000:.0f} ms"
    )
    print(f"server peak RSS: {peak_rss_kb / 1024:.0f} MiB sampled, VmHWM {hwm_kb / 1024:.0f} MiB")
    for connection in result.server_errors:
        print(f"FAIL: a {connection.kind} got {connection.status}")
    for connection in result.unended:
        print(f"FAIL: a {connection.kind} did not end: {connection.error or connection.status}")


def benchmark(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
    """Start the server, run the load once, print the figures."""
    # Every connection may wait in its model's line (beyond max_queued_tasks: 503 overloaded).
    line = [f"--LmspApp.max_queued_tasks={args.connections}"]
    store = f"sqlite:///{scratch / 'lmsp.sqlite3'}"
    with running_server(log_path, app="server", store_url=store, extra=line) as server:
        with RssSampler(server.pid) as rss:
            start = time.perf_counter()
            result = asyncio.run(
                run_load(server.lmsp_url, server.headers, args.connections, args.tokens, args.tasks)
            )
            wall_s = time.perf_counter() - start
        hwm_kb = proc_status_kb(server.pid, "VmHWM")
    print_result(result, rss.peak_kb, hwm_kb, wall_s)


def command_line() -> argparse.ArgumentParser:
    """The command line."""
    parser = benchmark_parser(__doc__, tokens=16, server_log=True)
    parser.add_argument("--connections", type=int, default=200, help="connections at once")
    parser.add_argument("--tasks", type=int, default=4, help="tasks the followers share")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    return benchmark_main(command_line(), benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
