"""Memory and load time of models coming and going, with the service's own engine and manager.

Loads the bundled model, then a copy of it under another name (a second model to the catalog
and to llama.cpp), then unloads both through ``ModelManager``, and prints this process's
resident set size (RSS) at each step, the manager's estimate, and the load times.

    .venv/bin/python benchmarks/model_memory.py                  # context 8192, 3 rounds
    .venv/bin/python benchmarks/model_memory.py --context 2048 --rounds 1
    .venv/bin/python benchmarks/model_memory.py --parallel 8    # LocalEngine.parallel_requests 8
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
from dataclasses import replace
from operator import itemgetter
from pathlib import Path

if not __package__:  # run as a file: python benchmarks/model_memory.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.figures import median
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from lmsp_jupyter.engine.manager import ModelManager
from lmsp_jupyter.engine.memory import resident_bytes

COPY = "bundled-copy"


def mb(size: float) -> str:
    """Bytes as MB (10^6 bytes), grouped by thousands."""
    return f"{size / 1e6:,.0f} MB"


async def one_round(manager: ModelManager, catalog: ModelCatalog) -> dict[str, float]:
    """RSS after each step and the two load times of one round (both models unloaded after)."""
    first, second = catalog.get(BUNDLED_MODEL_ID), catalog.get(COPY)
    figures: dict[str, float] = {"idle": resident_bytes()}
    started = time.perf_counter()
    await manager.load(first)
    figures["load_first_s"] = time.perf_counter() - started
    figures["one"] = resident_bytes()
    started = time.perf_counter()
    await manager.load(second)
    figures["load_second_s"] = time.perf_counter() - started
    figures["two"] = resident_bytes()
    await manager.unload(second.id)
    figures["after_one_unload"] = resident_bytes()
    await manager.unload(first.id)
    figures["after_both_unloads"] = resident_bytes()
    return figures


async def benchmark(args: argparse.Namespace, scratch: Path) -> None:
    """Copy the bundled model into ``scratch``, run the rounds, print the medians."""
    bundled = ModelCatalog().get(BUNDLED_MODEL_ID).path()  # assembled before timing
    shutil.copyfile(bundled, scratch / f"{COPY}.gguf")
    catalog = ModelCatalog(model_dirs=[scratch])
    settings = EngineSettings(context_size=args.context, threads=args.threads)
    engine = LocalEngine(replace(settings, parallel=args.parallel or settings.parallel))
    manager = ModelManager(engine, keep_alive_seconds=-1, memory_budget_bytes=0)
    try:
        rounds = [await one_round(manager, catalog) for _ in range(args.rounds)]
    finally:
        engine.close()
    entry = catalog.get(BUNDLED_MODEL_ID)
    mid = {key: median(rounds, itemgetter(key)) for key in rounds[0]}
    parallel = engine.settings.parallel
    print(f"context {args.context}, parallel {parallel}, {args.rounds} rounds, medians; RSS:")
    print(f"  no model loaded        {mb(mid['idle'])}")
    print(f"  bundled model loaded   {mb(mid['one'])}  (+{mb(mid['one'] - mid['idle'])})")
    print(f"  both models loaded     {mb(mid['two'])}  (+{mb(mid['two'] - mid['idle'])})")
    print(f"  copy unloaded          {mb(mid['after_one_unload'])}")
    print(f"  both unloaded          {mb(mid['after_both_unloads'])}")
    estimate, weights = mb(engine.footprint(entry)), mb(entry.weights_bytes)
    print(f"  estimate per model     {estimate} (weights {weights})")
    print(f"load time: bundled {mid['load_first_s']:.2f} s, copy {mid['load_second_s']:.2f} s")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    parser = benchmark_parser(__doc__, rounds=3)
    parser.add_argument("--context", type=int, default=8192, help="context size per model")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--parallel", type=int, help="sequences per model (LocalEngine.parallel_requests)"
    )
    return benchmark_main(
        parser, lambda args, scratch, _log: asyncio.run(benchmark(args, scratch)), argv
    )


if __name__ == "__main__":
    sys.exit(main())
