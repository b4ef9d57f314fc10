"""What a cold prompt costs read the engine's exact way, against the ways llama.cpp could read it.

The engine reads a prompt in passes of at most ``PASS_MAX`` tokens with llama.cpp's tiled matrix
product off, so that every pass it makes computes a token as any other pass would
(``engine/passes.py``; ``pass_sizes.py`` checks that). llama-server reads a prompt in passes of
512 with the tiled product on. This reads one ``--tokens``-token prompt through the engine's
``LlamaModel`` with each combination: passes of ``PASS_MAX`` or of 512 tokens, the tiled product
off, on (taken from 8 tokens of a pass) or forced (``GGML_CPU_TILED_MM_FORCE=1``: every pass,
decoding too), then decodes ``--decode`` tokens after it one pass at a time as the engine does.
llama.cpp reads its switches once per process, so each combination runs in a process of its
own. Printed: the prompt's read time (the best of ``--rounds``) and rate, its ratio to the
engine's way, and the median milliseconds of a decoded token.

It measures and never asserts: the exit code is 0 whatever the numbers.

Run: ``.venv/bin/python benchmarks/prefill.py [--tokens 1900] [--rounds 2]``; another build of
llama-cpp-python with that build's interpreter (``.venv-avx2/bin/python benchmarks/prefill.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

if not __package__:  # run as a file: python benchmarks/prefill.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.raw import Settings, build_info
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.engine.local.llama import TILED_MM_VARIABLE, BatchToken, LlamaModel
from lmsp_jupyter.engine.local.passes import PASS_MAX, lone_token_needs_pad, pass_size

FORCE_VARIABLE = "GGML_CPU_TILED_MM_FORCE"
LLAMA_SERVER_PASS = 512
#: (name, tokens a pass, the tiled product's switch, its force switch)
WAYS = [
    (f"passes of {PASS_MAX}, tiled off (the engine)", PASS_MAX, "0", "0"),
    (f"passes of {PASS_MAX}, tiled on", PASS_MAX, "1", "0"),
    (f"passes of {PASS_MAX}, tiled forced", PASS_MAX, "1", "1"),
    (f"passes of {LLAMA_SERVER_PASS}, tiled off", LLAMA_SERVER_PASS, "0", "0"),
    (f"passes of {LLAMA_SERVER_PASS}, tiled on (llama-server)", LLAMA_SERVER_PASS, "1", "0"),
]


def measure(tokens: int, decode: int, rounds: int, size: int) -> dict[str, float]:
    """In this process: the best read time of a ``tokens``-token prompt in passes of ``size``,
    and the median milliseconds of each of ``decode`` tokens decoded after it."""
    path = ModelCatalog(include_bundled=True).get(BUNDLED_MODEL_ID).path()
    threads = Settings.service_defaults().threads
    model = LlamaModel(path, cells=tokens + decode + 2, sequences=1, threads=threads, most=size)
    prompt = [2] + [int(t) for t in np.random.default_rng(1).integers(1000, 6000, tokens - 1)]
    try:
        reads = []
        for _ in range(rounds):
            model.forget(0)
            began, start = time.perf_counter(), 0
            while start < tokens:
                left = tokens - start  # the engine's even passes; llama-server's of 512
                end = start + (pass_size(left, most=size) if size <= PASS_MAX else min(left, size))
                model.decode(
                    [BatchToken(prompt[p], p, 0, p == tokens - 1) for p in range(start, end)]
                )
                start = end
            reads.append(time.perf_counter() - began)
        decoded = []
        for position in range(tokens, tokens + decode):
            batch = [BatchToken(1000 + position % 5000, position, 0, True)]
            if lone_token_needs_pad(position):
                batch.append(BatchToken(0, position + 1, 0, False))
            began = time.perf_counter()
            model.decode(batch)
            decoded.append(time.perf_counter() - began)
            model.forget(0, position + 1)
        return {"read_s": min(reads), "decode_ms": 1000 * statistics.median(decoded)}
    finally:
        model.close()


def benchmark(args: argparse.Namespace, _scratch: Path, _log_path: Path) -> None:
    """Measure each way in a process of its own and print the table."""
    if args.child:
        print(json.dumps(measure(args.tokens, args.decode, args.rounds, args.child)))
        return
    print(
        f"bundled model, a cold prompt of {args.tokens} tokens, best of {args.rounds}; "
        f"then {args.decode} tokens decoded one a pass"
    )
    print(f"{'way':44} {'prompt s':>9} {'tok/s':>7} {'ratio':>6} {'decode ms':>10}")
    engine_s = 0.0
    for name, size, tiled, forced in WAYS:
        env = {**os.environ, TILED_MM_VARIABLE: tiled, FORCE_VARIABLE: forced}
        command = [sys.executable, __file__, "--child", str(size)]
        command += ["--tokens", str(args.tokens), "--rounds", str(args.rounds)]
        command += ["--decode", str(args.decode)]
        run = subprocess.run(command, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{name}: {run.stderr[-2000:]}")
        figures = json.loads(run.stdout.strip().splitlines()[-1])
        engine_s = engine_s or figures["read_s"]
        print(
            f"{name:44} {figures['read_s']:>9.2f} {args.tokens / figures['read_s']:>7.0f} "
            f"{figures['read_s'] / engine_s:>6.2f} {figures['decode_ms']:>10.1f}",
            flush=True,
        )
    print(f"ratio: the prompt's read time over the engine's; {build_info()}")


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; 0 whatever it measures, 1 only if it could not measure."""
    parser = benchmark_parser(__doc__, tokens=1900, rounds=2)
    parser.add_argument("--decode", type=int, default=32, help="tokens decoded after the prompt")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    return benchmark_main(parser, benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
