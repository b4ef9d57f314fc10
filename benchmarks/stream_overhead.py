"""Streaming overhead of the LMSP service against raw llama-cpp-python.

One prompt, the bundled model and the service's default settings on both sides:

* raw: ``llama_cpp.Llama.create_completion(..., stream=True)`` in this process;
* service: ``POST /lmsp/v1/responses`` with ``"stream": true`` on a ``jupyter lmsp`` server
  that this script starts as a subprocess and stops at the end.

Runs alternate, never concurrently: one warm-up of each, then ``--rounds`` rounds of raw then
service. Each timed run follows an untimed one-token run of the same side (``--no-prime``: not),
so that its first token is not slowed by the caches the other process just took over. Prints
the median tokens/s of each side (end-to-end, from the call to the end of the stream, and
decode-only, from the first token to the last), the median time to first token, the ratio
service/raw and the first-token overhead against the targets. It measures and never asserts:
the exit code is 0 whatever the numbers.

Run: ``.venv/bin/python benchmarks/stream_overhead.py [--tokens 128] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import httpx

if not __package__:  # run as a file: python benchmarks/stream_overhead.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.figures import Sample, median, spread
from benchmarks.harness.meters import measured
from benchmarks.harness.raw import DEFAULT_PROMPT, RawRunner, Settings, print_context
from benchmarks.harness.server import Server, running_server
from benchmarks.harness.sse import iter_events
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.protocol.events import FINAL_EVENTS

TARGET_RATIO = 0.97
TARGET_OVERHEAD_MS = 10.0
#: The final events of a response that generated its text (the others end it with an error).
GENERATED = ("response.completed", "response.incomplete")


class ServiceClient:
    """Streams responses from the service and times their SSE events."""

    def __init__(self, server: Server, prompt: str) -> None:
        self.client = httpx.Client(base_url=server.base_url, headers=server.headers, timeout=300)
        self.prompt = prompt
        self.input_tokens = 0

    def run(self, max_tokens: int) -> Sample:
        """One streamed response: first delta and final event timed from the request."""
        body = {
            "model": BUNDLED_MODEL_ID,
            "input": self.prompt,
            "max_output_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
        }
        first, last = 0.0, 0.0
        deltas: list[str] = []
        start = time.perf_counter()
        with self.client.stream("POST", "/lmsp/v1/responses", json=body) as response:
            response.raise_for_status()
            for event in iter_events(response):
                now = time.perf_counter() - start
                if event.event == "response.output_text.delta":
                    first = first or now
                    last = now
                    deltas.append(event.data)  # parsed after the stream, not while it is timed
                elif event.event in FINAL_EVENTS:
                    return self._final(event.event, event.data, deltas, Sample(0, first, last, now))
        raise RuntimeError("the stream ended without a final event")

    def _final(self, name: str, data: str, deltas: list[str], times: Sample) -> Sample:
        """The sample of a stream that ended with event ``name``: its tokens and its text."""
        if name not in GENERATED:
            raise RuntimeError(f"the stream ended with {name}: {data}")
        usage: dict[str, Any] = json.loads(data)["usage"]
        self.input_tokens = usage["input_tokens"]
        text = "".join(json.loads(delta)["delta"] for delta in deltas)
        return replace(times, tokens=usage["output_tokens"], text=text)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self.client.close()


@dataclass
class Rounds:
    """Measured rounds, (raw, service) pairs: those on a quiet machine and the busy ones."""

    quiet: list[tuple[Sample, Sample]] = field(default_factory=list)
    busy: list[tuple[Sample, Sample]] = field(default_factory=list)

    def used(self) -> list[tuple[Sample, Sample]]:
        """The rounds the results come from: the quiet ones, or the busy ones if none was."""
        return self.quiet or self.busy

    @property
    def raw(self) -> list[Sample]:
        """The raw samples used."""
        return [pair[0] for pair in self.used()]

    @property
    def service(self) -> list[Sample]:
        """The service samples used."""
        return [pair[1] for pair in self.used()]


class Side(Protocol):
    """One way of generating: raw llama-cpp-python or the service."""

    def run(self, max_tokens: int) -> Sample:
        """Generate up to ``max_tokens`` tokens from the prompt, timed."""
        ...


@dataclass(frozen=True)
class Plan:
    """How the runs go."""

    tokens: int
    rounds: int
    max_background: float
    prime: bool


def timed_run(side: Side, plan: Plan, server_pid: int) -> Sample:
    """One measured run of ``side``, after an untimed one-token run when priming."""
    if plan.prime:
        side.run(1)
    return measured(lambda: side.run(plan.tokens), server_pid)


def alternate(raw: Side, service: Side, plan: Plan, server_pid: int) -> Rounds:
    """A warm-up of each side, then ``plan.rounds`` rounds of raw, service, raw, service...

    A round during which other processes took more than ``plan.max_background`` of the
    machine is set aside and run again, within three times the rounds asked for in all.
    """
    raw.run(plan.tokens)
    service.run(plan.tokens)
    result = Rounds()
    for attempt in range(3 * plan.rounds):
        if len(result.quiet) == plan.rounds:
            break
        pair = timed_run(raw, plan, server_pid), timed_run(service, plan, server_pid)
        busy = max(sample.background for sample in pair) > plan.max_background
        (result.busy if busy else result.quiet).append(pair)
        print(
            f"  round {attempt + 1:>2}: "
            f"raw {pair[0].tokens_per_s:5.1f} tok/s {pair[0].ttft_ms:5.1f} ms, "
            f"service {pair[1].tokens_per_s:5.1f} tok/s {pair[1].ttft_ms:5.1f} ms, "
            f"background {max(sample.background for sample in pair):5.1%}"
            f"{'  (set aside: machine busy)' if busy else ''}",
            flush=True,
        )
    return result


def print_rounds(rounds: Rounds, asked: int) -> None:
    """How many rounds the results come from, and how busy the machine was meanwhile."""
    background = median(rounds.raw + rounds.service, lambda s: s.background)
    print(
        f"rounds used: {len(rounds.quiet)} on a quiet machine of {asked} asked, "
        f"{len(rounds.busy)} set aside; median background load: {background:.1%} of the machine"
    )
    if not rounds.quiet:
        print("warning: no round ran on a quiet machine; these busy rounds are unreliable")


def print_table(rounds: Rounds) -> None:
    """Per side: tokens generated, median tokens/s (end-to-end, decode-only) and TTFT."""
    raw, service = rounds.raw, rounds.service
    print(f"\n{'side':<9}{'tokens':>8}{'tok/s e2e':>12}{'tok/s decode':>14}{'TTFT ms':>10}")
    for name, samples in (("raw", raw), ("service", service)):
        counts = "/".join(str(count) for count in sorted({s.tokens for s in samples}))
        print(
            f"{name:<9}{counts:>8}"
            f"{median(samples, lambda s: s.tokens_per_s):>12.1f}"
            f"{median(samples, lambda s: s.decode_tokens_per_s):>14.1f}"
            f"{median(samples, lambda s: s.ttft_ms):>10.1f}"
        )
    if {s.tokens for s in raw} != {s.tokens for s in service}:
        print("warning: the two sides generated different numbers of tokens")
    same = {s.text for s in raw} == {s.text for s in service}
    print(f"output text: {'the same' if same else 'DIFFERENT'} on both sides")


def print_summary(rounds: Rounds) -> tuple[float, float]:
    """Ratio and first-token overhead of the medians, and their spread over the rounds.

    Returns (ratio of end-to-end tokens/s, first-token overhead in ms).
    """
    raw, service = rounds.raw, rounds.service
    ratio = median(service, lambda s: s.tokens_per_s) / median(raw, lambda s: s.tokens_per_s)
    decode_ratio = median(service, lambda s: s.decode_tokens_per_s) / median(
        raw, lambda s: s.decode_tokens_per_s
    )
    overhead = median(service, lambda s: s.ttft_ms) - median(raw, lambda s: s.ttft_ms)
    print(f"\nratio (service/raw) tokens/s = {ratio:.3f}   (decode-only: {decode_ratio:.3f})")
    print(f"first-token overhead = {overhead:.1f} ms")
    pairs = list(zip(raw, service, strict=True))
    ratios = [s.tokens_per_s / r.tokens_per_s for r, s in pairs]
    print(f"per round: ratio {spread(ratios, '.3f')}")
    print(f"per round: overhead ms {spread([s.ttft_ms - r.ttft_ms for r, s in pairs], '.1f')}")
    return ratio, overhead


def print_targets(ratio: float, overhead: float) -> None:
    """The targets of the issue, each with PASS or MISS."""
    print(
        f"target: ratio >= {TARGET_RATIO}      "
        f"{'PASS' if ratio >= TARGET_RATIO else 'MISS'} ({ratio:.3f})"
    )
    print(
        f"target: overhead <= {TARGET_OVERHEAD_MS:.0f} ms   "
        f"{'PASS' if overhead <= TARGET_OVERHEAD_MS else 'MISS'} ({overhead:.1f} ms)"
    )


def command_line() -> argparse.ArgumentParser:
    """The command line."""
    parser = benchmark_parser(
        __doc__, tokens=128, rounds=5, prompt=DEFAULT_PROMPT, max_background=5, server_log=True
    )
    parser.add_argument(
        "--no-prime",
        action="store_true",
        help="time each run right after the other side's, without the untimed one-token run "
        "of the same side that otherwise precedes it",
    )
    return parser


def benchmark(args: argparse.Namespace, _scratch: Path, log_path: Path) -> None:
    """Load both sides, alternate the runs and print the results."""
    settings = Settings.service_defaults()
    model_path = ModelCatalog().get(BUNDLED_MODEL_ID).path()
    print_context(settings, model_path, args.prompt, args.tokens, args.rounds, not args.no_prime)
    raw = RawRunner(model_path, settings, args.prompt)
    with running_server(log_path) as server:
        service = ServiceClient(server, args.prompt)
        plan = Plan(args.tokens, args.rounds, args.max_background / 100, not args.no_prime)
        try:
            print("\nruns (alternating, sequential; TTFT after tok/s):", flush=True)
            rounds = alternate(raw, service, plan, server.pid)
        finally:
            service.close()
    print(f"\nprompt tokens: raw {len(raw.prompt_tokens)}, service {service.input_tokens}")
    print_rounds(rounds, args.rounds)
    print_table(rounds)
    ratio, overhead = print_summary(rounds)
    print_targets(ratio, overhead)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    return benchmark_main(command_line(), benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
