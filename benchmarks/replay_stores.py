"""Stored replay on each store backend: the same finished task read back from SQLite and from
PostgreSQL, one fresh server per backend, and the ratio PostgreSQL/SQLite (issue 26's goal:
at least half the SQLite rate).

The PostgreSQL server is a throwaway cluster from Debian's ``postgresql`` package, started the
way the tests start theirs (``tests/postgres.py``) and always removed. Where it cannot start,
the PostgreSQL side prints ``not measured`` with the reason, and the rest of the run goes on.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from benchmarks.harness.figures import median
from benchmarks.harness.server import running_server
from benchmarks.replay_report import print_replay
from benchmarks.replay_stored import fill_store, replay_phase

#: The goal of the PostgreSQL replay rate, as a share of the SQLite one.
POSTGRESQL_GOAL = 0.5


@contextlib.contextmanager
def postgresql_database() -> Iterator[str]:
    """The URL of a new database on a throwaway PostgreSQL cluster, removed afterwards.

    Raises ``RuntimeError`` with the reason where PostgreSQL is not installed or cannot start.
    """
    from tests.postgres import PostgresServer, find_bin  # the PostgreSQL harness of the tests

    bin_dir = find_bin()
    if isinstance(bin_dir, str):
        raise RuntimeError(bin_dir)
    server = PostgresServer(bin_dir, 5432)  # a unix socket in its own directory: no clash
    try:
        server.start()
        yield server.new_database()
    finally:
        server.remove()


def measure_store(url: str, events: int, runs: int, log_path: Path) -> float:
    """Fill the store at ``url`` with a task of ``events`` events, replay it ``runs`` times
    through a server on that store, print the table; the median events/s."""
    stored = fill_store(url, events)
    with running_server(log_path, store_url=url) as server:
        replays, usage = replay_phase(server, stored, runs)
    print_replay(stored, replays, usage)
    return median(replays, lambda run: run.events_per_s)


def compare_stores(scratch: Path, log_path: Path, events: int, runs: int) -> None:
    """The stored replay on SQLite, then on PostgreSQL, and the ratio of their medians."""
    print(f"\nstored replay by store backend ({events} events, {runs} runs each):", flush=True)
    print("SQLite:", flush=True)
    sqlite = measure_store(f"sqlite:///{scratch / 'replay-stores.sqlite3'}", events, runs, log_path)
    print("PostgreSQL:", flush=True)
    try:
        with postgresql_database() as url:
            postgresql = measure_store(url, events, runs, log_path)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as error:  # did not start
        print(f"PostgreSQL: not measured: {error}")
        return
    print(
        f"ratio postgresql/sqlite stored replay events/s: {postgresql / sqlite:.3f}"
        f"   (goal >= {POSTGRESQL_GOAL})"
    )
