"""How a benchmark script runs and ends: in a scratch directory, the server always stopped.

A benchmark measures and never asserts: its exit code is 0 whatever the numbers, 1 only if it
could not measure (then the end of the server's log follows the error), 130 when interrupted
(Ctrl-C or SIGTERM, which both leave through the ``finally`` blocks that stop the server).
"""

from __future__ import annotations

import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx

LOG_TAIL_CHARS = 4000


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
