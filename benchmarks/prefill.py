"""What a cold prompt costs read the engine's exact way, against the ways llama.cpp could read it.

The engine reads a prompt's whole blocks in block passes of up to 512 tokens on llama.cpp's fast
kernels and the rest in token passes on its reference kernels (``engine/passes.py``;
``pass_sizes.py`` checks that each regime gives a token the same result whatever its pass).
llama-server reads every pass of 512 on the fast kernels. This reads one ``--tokens``-token
prompt through the engine's ``LlamaModel`` in each way below, then decodes ``--decode`` tokens
after it one pass at a time, each in a process of its own (llama.cpp reads its switches once per
process). Printed: the prompt's read time (the best of ``--rounds``) and rate, its ratio to the
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
from lmsp_jupyter.engine.local.llama.model import BatchToken, LlamaModel
from lmsp_jupyter.engine.local.passes import PASS_MAX, block_end, block_pass_size, pass_size

TILED_VARIABLE = "GGML_CPU_TILED_MM"
LLAMA_SERVER_PASS = 512
#: (name, tokens a pass, the tiled product's switch, how passes are read): ``engine`` blocks
#: then token passes, ``token`` token passes only, ``fast`` every pass on the fast kernels.
WAYS = [
    (f"the engine: blocks of {LLAMA_SERVER_PASS}, then tokens", LLAMA_SERVER_PASS, "1", "engine"),
    (f"token passes of {PASS_MAX} (the engine before)", PASS_MAX, "1", "token"),
    (f"token passes of {LLAMA_SERVER_PASS}", LLAMA_SERVER_PASS, "1", "token"),
    (f"block passes of {LLAMA_SERVER_PASS}, tiled off", LLAMA_SERVER_PASS, "0", "engine"),
    (f"fast passes of {LLAMA_SERVER_PASS} (llama-server)", LLAMA_SERVER_PASS, "1", "fast"),
]


def measure(tokens: int, decode: int, rounds: int, size: int, kind: str) -> dict[str, float]:
    """In this process: the best read time of a ``tokens``-token prompt in passes of ``size``
    read the ``kind`` way, and the median milliseconds of each of ``decode`` tokens decoded
    after it."""
    path = ModelCatalog(include_bundled=True).get(BUNDLED_MODEL_ID).path()
    threads = Settings.service_defaults().threads
    model = LlamaModel(path, cells=tokens + decode + 2, sequences=1, threads=threads, most=size)
    prompt = [2] + [int(t) for t in np.random.default_rng(1).integers(1000, 6000, tokens - 1)]
    blocks = block_end(tokens) if kind == "engine" else 0
    try:
        reads = []
        for _ in range(rounds):
            model.forget(0)
            began, start = time.perf_counter(), 0
            while start < tokens:
                left = tokens - start
                block = start < blocks or kind == "fast"
                if start < blocks:
                    end = start + block_pass_size(blocks - start, most=size)
                elif kind == "fast":
                    end = start + min(left, size)
                else:
                    end = (
                        start + pass_size(left, most=size)
                        if size <= PASS_MAX
                        else start + min(left, size)
                    )
                model.decode(
                    [BatchToken(prompt[p], p, 0, p == tokens - 1) for p in range(start, end)],
                    block,
                )
                start = end
            reads.append(time.perf_counter() - began)
        decoded = []
        for position in range(tokens, tokens + decode):
            batch = [BatchToken(1000 + position % 5000, position, 0, True)]
            began = time.perf_counter()
            model.decode(batch, kind == "fast")
            decoded.append(time.perf_counter() - began)
            model.forget(0, position + 1)
        return {"read_s": min(reads), "decode_ms": 1000 * statistics.median(decoded)}
    finally:
        model.close()


def benchmark(args: argparse.Namespace, _scratch: Path, _log_path: Path) -> None:
    """Measure each way in a process of its own and print the table."""
    if args.child:
        size, kind = args.child.split(":")
        print(json.dumps(measure(args.tokens, args.decode, args.rounds, int(size), kind)))
        return
    print(
        f"bundled model, a cold prompt of {args.tokens} tokens, best of {args.rounds}; "
        f"then {args.decode} tokens decoded one a pass"
    )
    print(f"{'way':44} {'prompt s':>9} {'tok/s':>7} {'ratio':>6} {'decode ms':>10}")
    engine_s = 0.0
    for name, size, tiled, kind in WAYS:
        env = {**os.environ, TILED_VARIABLE: tiled}
        command = [sys.executable, __file__, "--child", f"{size}:{kind}"]
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
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    return benchmark_main(parser, benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
