"""How a benchmark script starts and ends: its command line, a scratch directory, the server
always stopped.

A benchmark measures and never asserts: its exit code is 0 whatever the numbers, 1 only if it
could not measure (then the end of the server's log follows the error), 130 when interrupted
(Ctrl-C or SIGTERM, which both leave through the ``finally`` blocks that stop the server).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx

LOG_TAIL_CHARS = 4000
#: A benchmark's body: ``body(args, scratch, log_path)``.
Body = Callable[[argparse.Namespace, Path, Path], None]


def benchmark_parser(
    doc: str,
    *,
    tokens: int | None = None,
    rounds: int | None = None,
    prompt: str | None = None,
    max_background: float | None = None,
    server_log: bool = False,
) -> argparse.ArgumentParser:
    """The command line of a benchmark described by ``doc`` (its module docstring, whose first
    paragraph is the description), with the options most benchmarks share: ``--tokens``,
    ``--rounds``, ``--prompt`` and ``--max-background`` (with the defaults given; left out when
    None) and ``--server-log``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n", 1)[0])
    if tokens is not None:
        parser.add_argument(
            "--tokens", type=int, default=tokens, help="max_output_tokens of each answer"
        )
    if rounds is not None:
        parser.add_argument("--rounds", type=int, default=rounds, help="measured rounds")
    if prompt is not None:
        parser.add_argument("--prompt", default=prompt, help="the user message")
    if max_background is not None:
        parser.add_argument(
            "--max-background",
            type=float,
            default=max_background,
            metavar="PERCENT",
            help="measure again when other processes took more than this share of the "
            f"machine's CPUs meanwhile (default: {max_background:g})",
        )
    if server_log:
        parser.add_argument(
            "--server-log",
            type=Path,
            default=None,
            help="keep the server's output here (default: a temporary file)",
        )
    return parser


def benchmark_main(parser: argparse.ArgumentParser, body: Body, argv: list[str] | None) -> int:
    """Parse ``argv`` and run ``body`` with :func:`run_benchmark`; return the exit code."""
    args = parser.parse_args(argv)
    return run_benchmark(
        lambda scratch, log_path: body(args, scratch, log_path), getattr(args, "server_log", None)
    )


def run_benchmark(body: Callable[[Path, Path], None], server_log: Path | None = None) -> int:
    """Call ``body(scratch, log_path)``: a fresh directory and where the server's output goes
    (``server_log``, or a file in the scratch directory); return the exit code."""
    signal.signal(signal.SIGTERM, _interrupt)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        log_path = server_log or scratch / "server.log"
        try:
            body(scratch, log_path)
        except KeyboardInterrupt:
            print("\ninterrupted", file=sys.stderr)
            return 130
        except (RuntimeError, OSError, httpx.HTTPError) as error:
            print(f"\nbenchmark failed: {error}", file=sys.stderr)
            if log_path.exists():
                print(log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:], file=sys.stderr)
            return 1
    return 0


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM ends the benchmark as Ctrl-C does, so that the server is stopped on the way."""
    raise KeyboardInterrupt
