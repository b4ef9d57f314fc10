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
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx

if not __package__:  # run as a file: python benchmarks/replay.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.server import Server, running_server
from benchmarks.replay_live import LiveRun, live_run
from benchmarks.replay_report import (
    print_joins,
    print_live,
    print_profile,
    print_replay,
    progress_line,
)
from benchmarks.replay_stored import DEFAULT_PROMPT, fill_store, replay_phase
from benchmarks.replay_stores import compare_stores
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID


def command_line() -> argparse.ArgumentParser:
    """The command line."""
    parser = benchmark_parser(
        __doc__, tokens=300, rounds=3, prompt=DEFAULT_PROMPT, max_background=15, server_log=True
    )
    add = parser.add_argument
    add("--events", type=int, default=10_000, help="events of the stored task (>= 5)")
    add("--replay-runs", type=int, default=5, help="timed reads of the stored task")
    add("--followers", type=int, default=100, help="concurrent followers of the live task")
    add("--retries", type=int, default=2, help="most re-runs of one live run (machine busy)")
    add(
        "--join-spread",
        type=float,
        default=0.8,
        metavar="FRACTION",
        help="late followers join over this fraction of the 0-follower run's duration",
    )
    add("--skip-live", action="store_true", help="only the stored replay")
    add(
        "--postgresql",
        action="store_true",
        help="then the stored replay on SQLite and on a throwaway PostgreSQL, one server each",
    )
    add(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for jupyter lmsp, e.g. --server-arg=--LocalEngine.threads=1",
    )
    add(
        "--profile-server",
        type=Path,
        default=None,
        metavar="PATH",
        help="run the server under cProfile (event-loop thread), save the stats to PATH and "
        "print the top functions; slows the server, so its figures are not comparable",
    )
    return parser


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
        busy = run.usage.background > args.max_background / 100
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
    store_url = f"sqlite:///{scratch / 'lmsp.sqlite3'}"
    stored = fill_store(store_url, args.events)
    extra = args.server_arg
    with running_server(
        log_path, root=scratch, store_url=store_url, profile=args.profile_server, extra=extra
    ) as server:
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
    if args.postgresql:
        compare_stores(scratch, log_path, args.events, args.replay_runs)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    return benchmark_main(command_line(), benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
