"""Decode rate with a JSON Schema enforced (llguidance, checked lazily) against free text.

One engine, the bundled model, greedy decoding and the service's default settings, in this
process through the service (``ResponseService``, no HTTP): rounds alternate an unconstrained
answer and a ``response_format`` answer of a schema that keeps the model writing (an array of
strings long enough to reach ``--tokens``). Each rate is decode-only, output tokens after the
first over the time from the first text delta to the last. It prints the medians and their
ratio (the target is >= 0.8). A free answer may end before ``--tokens``; its token counts are
printed.

Run: ``.venv/bin/python benchmarks/constrained.py [--tokens 128] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: python benchmarks/constrained.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.figures import Sample, median
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.engine.generation import CancelToken
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from lmsp_jupyter.protocol.events import OutputTextDelta
from lmsp_jupyter.protocol.requests import parse_response_request
from lmsp_jupyter.service.models import ModelDirectory
from lmsp_jupyter.service.responses import ResponseService

PROMPT = "List the names of as many animals as you can, with a short note on each."
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "animals": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 20},
                    "note": {"type": "string", "maxLength": 60},
                },
                "required": ["name", "note"],
                "additionalProperties": False,
            },
            "minItems": 200,
        }
    },
    "required": ["animals"],
    "additionalProperties": False,
}


async def answer(service: ResponseService, tokens: int, schema: dict[str, Any] | None) -> Sample:
    """Generate one answer of at most ``tokens`` tokens, constrained by ``schema`` if given;
    its first and last token are its first and last text delta."""
    body: dict[str, Any] = {
        "model": BUNDLED_MODEL_ID,
        "input": PROMPT,
        "temperature": 0,
        "max_output_tokens": tokens,
    }
    if schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "animals", "schema": schema, "strict": True},
        }
    start = time.perf_counter()
    run = await service.start(parse_response_request(body))
    times: list[float] = []
    async for event in service.events(run, CancelToken()):
        if isinstance(event.data, OutputTextDelta):
            times.append(time.perf_counter() - start)
    assert run.usage is not None and times
    return Sample(run.usage.output_tokens, times[0], times[-1], time.perf_counter() - start)


async def compare(tokens: int, rounds: int) -> tuple[list[Sample], list[Sample]]:
    """``rounds`` alternating (free, constrained) pairs after one warm-up of each."""
    engine = LocalEngine(EngineSettings())
    service = ResponseService(ModelDirectory(ModelCatalog(include_bundled=True), engine), engine)
    try:
        await answer(service, 8, None)
        await answer(service, 8, SCHEMA)
        free: list[Sample] = []
        constrained: list[Sample] = []
        for _ in range(rounds):
            free.append(await answer(service, tokens, None))
            constrained.append(await answer(service, tokens, SCHEMA))
        return free, constrained
    finally:
        engine.close()


def benchmark(args: argparse.Namespace, _scratch: Path, _log_path: Path) -> None:
    """Measure and print the constrained and unconstrained decode rates and their ratio."""
    free, constrained = asyncio.run(compare(args.tokens, args.rounds))
    free_rate = median(free, lambda run: run.decode_tokens_per_s)
    constrained_rate = median(constrained, lambda run: run.decode_tokens_per_s)
    print(f"model {BUNDLED_MODEL_ID}, {args.rounds} rounds of at most {args.tokens} tokens")
    print(f"unconstrained  {free_rate:8.1f} tok/s  (tokens: {[run.tokens for run in free]})")
    print(
        f"constrained    {constrained_rate:8.1f} tok/s  "
        f"(tokens: {[run.tokens for run in constrained]})"
    )
    ratio = constrained_rate / free_rate if free_rate else 0.0
    print(f"ratio          {ratio:8.2f}   (target >= 0.80)")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    return benchmark_main(benchmark_parser(__doc__, tokens=128, rounds=5), benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
