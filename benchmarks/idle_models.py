"""What an idle model costs the one that decodes: two models, each on its own thread.

The bundled model loaded twice, as the engine loads a model (``LlamaModel``: weights not
repacked, the service's threads), each driven by a thread of its own, as the service drives
each loaded model (its worker) and each embedding model. Model A decodes ``--tokens`` tokens
one pass at a time: alone; then each round, after model B decoded on its thread and was left
as it was, and after B's thread let its compute threads go (``release_compute_threads``, which
the service's models call when they go idle). Printed: A's median tokens/s in each state and
the ratios to alone. llama.cpp built without OpenMP has no such threads: the states are level.

It measures and never asserts: the exit code is 0 whatever the numbers.

Run: ``.venv/bin/python benchmarks/idle_models.py [--tokens 64] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if not __package__:  # run as a file: python benchmarks/idle_models.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.raw import Settings, build_info
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.engine.local.llama.model import BatchToken, LlamaModel
from lmsp_jupyter.engine.local.llama.runtime import release_compute_threads

#: Any tokens will do: the rate of a pass does not depend on which.
_FIRST_TOKEN = 1000


def decode_rate(model: LlamaModel, tokens: int) -> float:
    """Tokens a second of ``model`` decoding ``tokens`` tokens of sequence 0, one a pass."""
    model.forget(0)
    model.decode([BatchToken(_FIRST_TOKEN, 0, 0, True)])
    start = time.perf_counter()
    for position in range(1, tokens + 1):
        model.decode([BatchToken(_FIRST_TOKEN + position, position, 0, True)])
    return tokens / (time.perf_counter() - start)


def benchmark(args: argparse.Namespace, _scratch: Path, _log_path: Path) -> None:
    """Load both models on their threads, measure A in each state, print the table."""
    path = ModelCatalog().get(BUNDLED_MODEL_ID).path()
    settings = Settings.service_defaults()
    thread_a, thread_b = ThreadPoolExecutor(1), ThreadPoolExecutor(1)

    def load() -> LlamaModel:
        return LlamaModel(path, cells=settings.context_size, sequences=2, threads=settings.threads)

    a = thread_a.submit(load).result()
    b = thread_b.submit(load).result()
    try:
        print(f"bundled model twice, {settings.threads} threads, {args.tokens} tokens a run")
        states = ("alone", "beside B, kept", "beside B, released")
        rates: dict[str, list[float]] = {state: [] for state in states}
        rates["alone"].append(thread_a.submit(decode_rate, a, args.tokens).result())
        for _ in range(args.rounds):
            thread_b.submit(decode_rate, b, args.tokens).result()
            rates["beside B, kept"].append(thread_a.submit(decode_rate, a, args.tokens).result())
            thread_b.submit(release_compute_threads).result()
            released = thread_a.submit(decode_rate, a, args.tokens).result()
            rates["beside B, released"].append(released)
        alone = statistics.median(rates["alone"])
        print("model A               tok/s  ratio to alone")
        for state, values in rates.items():
            rate = statistics.median(values)
            print(f"{state:<20} {rate:6.1f}  {rate / alone:14.3f}")
        print(build_info())
    finally:
        thread_a.submit(a.close).result()
        thread_b.submit(b.close).result()
        thread_a.shutdown()
        thread_b.shutdown()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    parser = benchmark_parser(__doc__, tokens=64, rounds=3)
    return benchmark_main(parser, benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
