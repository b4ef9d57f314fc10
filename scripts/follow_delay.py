"""The delay that following a task from another server adds to each event (issue 26).

A server runs a task (the scripted engine of the tests, one event every ``--interval`` s); a
follower on that server gets each event live, a follower on a second server sharing the store
reads it from the store, polling every ``--poll`` s. The added delay of an event is when the
second follower got it minus when the first did. Runs on a new SQLite file, and with
``--postgresql`` also on a PostgreSQL server of the tests (tests/postgres.py).

    .venv/bin/python scripts/follow_delay.py --postgresql
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmsp_jupyter.service.store import open_store
from lmsp_jupyter.service.store.records import StoredEvent
from lmsp_jupyter.service.tasks import TaskService
from tests.conftest import MODEL, free_port
from tests.doubles import ScriptedEngine
from tests.postgres import PostgresServer, find_bin
from tests.service.helpers import services

OWNER = "jupyter"


async def arrivals(tasks: TaskService, task_id: str) -> dict[int, float]:
    """When each event of the task reached a follower on ``tasks``."""
    seen: dict[int, float] = {}
    async for event in tasks.follow(task_id, OWNER, 0):
        assert isinstance(event, StoredEvent), event  # no interruption
        seen[event.id] = time.perf_counter()
    return seen


async def measure(url: str, events: int, interval: float, poll: float) -> list[float]:
    """The added delays (s) of a task's events followed from another server on ``url``."""
    owner_store, other_store = open_store(url), open_store(url)
    try:
        _, owner = services(ScriptedEngine(deltas=["a"] * events, delay=interval), owner_store)
        _, other = services(ScriptedEngine(deltas=["a"]), other_store)
        other.follow_poll_seconds = poll
        body: dict[str, object] = {"type": "response", "request": {"model": MODEL, "input": "x"}}
        task = await owner.create(body, OWNER)
        live, polled = await asyncio.gather(arrivals(owner, task.id), arrivals(other, task.id))
        assert list(polled) == list(live), "an event lost or duplicated"
        return [polled[event_id] - live[event_id] for event_id in live]
    finally:
        owner_store.close()
        other_store.close()


def report(name: str, delays: list[float]) -> None:
    ms = sorted(delay * 1000 for delay in delays)
    p95 = ms[int(len(ms) * 0.95) - 1]
    print(
        f"{name}: {len(ms)} events, added delay median {statistics.median(ms):.1f} ms,"
        f" p95 {p95:.1f} ms, max {ms[-1]:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between events")
    parser.add_argument("--poll", type=float, default=0.05, help="follow_poll_seconds")
    parser.add_argument("--postgresql", action="store_true", help="also on PostgreSQL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'lmsp.sqlite3'}"
        report("sqlite", asyncio.run(measure(url, args.events, args.interval, args.poll)))
    if args.postgresql:
        found = find_bin()
        if isinstance(found, str):
            sys.exit(found)
        server = PostgresServer(found, free_port())
        try:
            server.start()
            url = server.new_database()
            delays = asyncio.run(measure(url, args.events, args.interval, args.poll))
            report("postgresql", delays)
        finally:
            server.remove()


if __name__ == "__main__":
    main()
