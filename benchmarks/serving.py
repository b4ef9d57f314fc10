"""Serving many streams: this service against llama-server and raw llama-cpp-python.

Same GGUF (the bundled model), same run, greedy decoding, the service's default settings but
for speculation, off unless ``--speculation`` is given, as llama-server runs here without a
``--spec-type`` (``speculation.py`` measures speculation against llama-server's n-gram modes):

* streams: 1, 4 and 8 concurrent requests (distinct prompts), aggregate tokens/s and each
  stream's first-token time;
* follow-up turn: a long first turn (``--history`` tokens of input, cold), then a follow-up that
  continues it (``previous_response_id`` here, the same text again with ``cache_prompt`` for
  llama-server): first-token times;
* constrained decoding: the decode rate of a JSON-schema answer against a free one;
* raw: llama-cpp-python in this process, one stream, for the one-stream ratio.

llama-server runs only when ``--llama-server PATH`` names its binary (see README.md); given
twice (a second build, e.g. without AVX-512), each binary is a column of its own. It measures
and never asserts: the exit code is 0 whatever the numbers.

Run: ``.venv/bin/python benchmarks/serving.py [--tokens 128] [--llama-server PATH]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import httpx

if not __package__:  # run as a file: python benchmarks/serving.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import run_benchmark
from benchmarks.harness.llama_server import build_flags, llama_server
from benchmarks.harness.raw import RawRunner, Settings, build_info, render_prompt
from benchmarks.harness.server import Server, running_server
from benchmarks.harness.sse import iter_events
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.protocol.events import FINAL_EVENTS

SUBJECTS = ["a lighthouse", "the sea", "a violin", "winter", "a library", "owls", "a river", "tea"]
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "year": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["title", "year", "tags"],
}
PARAGRAPH = (
    "The keeper climbed the stairs each evening, trimmed the wick, wound the clockwork and "
    "wrote the weather in a book whose pages smelled of salt. "
)
GOALS = {"4 streams": 1.5, "8 streams": 2.2, "follow-up": 0.10, "constrained": 0.8, "raw": 0.97}


@dataclass(frozen=True)
class Stream:
    """One streamed answer: tokens, first and last token and end, seconds from the batch start."""

    tokens: int
    first_s: float
    last_s: float
    end_s: float
    #: Tokens drafted by llama-server's speculation, and those of them accepted.
    drafted: int = 0
    accepted: int = 0

    @property
    def decode_rate(self) -> float:
        span = self.last_s - self.first_s
        return (self.tokens - 1) / span if span > 0 else float("nan")


class Side(Protocol):
    """A server that streams one answer."""

    name: str

    def stream(self, prompt: str, tokens: int, start: float, **options: Any) -> Stream:
        """Stream the answer to a user message ``prompt``; times count from ``start``."""
        ...

    def follow_up(self, history: str, tokens: int) -> tuple[float, float]:
        """First-token seconds of a cold first turn and of the turn that continues it."""
        ...


class Service:
    """This service's ``POST /lmsp/v1/responses``."""

    name = "service"

    def __init__(self, server: Server) -> None:
        self.client = httpx.Client(
            base_url=server.lmsp_url,
            headers=server.headers,
            timeout=600,
            limits=httpx.Limits(max_connections=16),
        )
        self._last_id = ""

    def stream(self, prompt: str, tokens: int, start: float, **options: Any) -> Stream:
        body = {
            "model": BUNDLED_MODEL_ID,
            "input": prompt,
            "max_output_tokens": tokens,
            "temperature": 0,
            "stream": True,
            **options,
        }
        first = last = 0.0
        with self.client.stream("POST", "/responses", json=body) as response:
            response.raise_for_status()
            for event in iter_events(response):
                now = time.perf_counter() - start
                if event.event == "response.output_text.delta":
                    first, last = first or now, now
                elif event.event in FINAL_EVENTS:
                    usage = json.loads(event.data).get("usage") or {}
                    return Stream(usage.get("output_tokens", 0), first, last, now)
        raise RuntimeError("the stream ended without a final event")

    def follow_up(self, history: str, tokens: int) -> tuple[float, float]:
        start = time.perf_counter()
        cold = self._first_token({"input": history, "store": True}, tokens, start)
        start = time.perf_counter()
        warm = self._first_token(
            {"input": "And then?", "previous_response_id": self._last_id}, tokens, start
        )
        return cold, warm

    def _first_token(self, fields: dict[str, Any], tokens: int, start: float) -> float:
        body = {"model": BUNDLED_MODEL_ID, "max_output_tokens": tokens, "temperature": 0}
        first = 0.0
        with self.client.stream(
            "POST", "/responses", json={**body, **fields, "stream": True}
        ) as response:
            response.raise_for_status()
            for event in iter_events(response):
                if event.event == "response.created":
                    self._last_id = json.loads(event.data)["response_id"]
                if event.event == "response.output_text.delta":
                    first = first or time.perf_counter() - start
        return first


class LlamaServer:
    """llama.cpp's own server (``/completion``), prompts rendered as the service renders them."""

    name = "llama-server"

    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=600)
        self._last_text = ""

    def stream(self, prompt: str, tokens: int, start: float, **options: Any) -> Stream:
        return self.stream_text(render_prompt(prompt), tokens, start, **options)

    def stream_text(self, text: str, tokens: int, start: float, **options: Any) -> Stream:
        """Stream the completion of ``text`` (a prompt rendered already); times from ``start``."""
        body = {
            "prompt": text,
            "n_predict": tokens,
            "temperature": 0,
            "stream": True,
            "cache_prompt": True,
            **options,
        }
        first = last = 0.0
        count = 0
        pieces: list[str] = []
        with self.client.stream("POST", "/completion", json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                now = time.perf_counter() - start
                chunk = json.loads(line[5:])
                if chunk.get("content"):
                    count += 1
                    first, last = first or now, now
                    pieces.append(chunk["content"])
                if chunk.get("stop"):
                    self._last_text = "".join(pieces)
                    timings = chunk.get("timings") or {}
                    return Stream(
                        chunk.get("tokens_predicted", count),
                        first,
                        last,
                        now,
                        timings.get("draft_n", 0),
                        timings.get("draft_n_accepted", 0),
                    )
        raise RuntimeError("llama-server ended the stream without a stop chunk")

    def follow_up(self, history: str, tokens: int) -> tuple[float, float]:
        first_turn = render_prompt(history)
        start = time.perf_counter()
        cold = self.stream_text(first_turn, tokens, start)
        answer = self._last_text
        follow = render_prompt(history, answer, "And then?")
        start = time.perf_counter()
        warm = self.stream_text(follow, tokens, start)
        return cold.first_s, warm.first_s


def concurrent(side: Side, count: int, tokens: int) -> tuple[float, list[float]]:
    """Aggregate tokens/s of ``count`` streams at once, and each one's first-token time."""
    start = time.perf_counter()
    prompts = [f"Write a long story about {SUBJECTS[i % len(SUBJECTS)]}." for i in range(count)]
    with ThreadPoolExecutor(count) as pool:
        streams = list(pool.map(lambda p: side.stream(p, tokens, start), prompts))
    wall = max(s.end_s for s in streams)
    return sum(s.tokens for s in streams) / wall, sorted(s.first_s for s in streams)


def constrained_ratio(side: Side, tokens: int) -> float:
    """Decode rate of a JSON-schema answer over that of a free answer."""
    prompt = "Describe a famous book as JSON with its title, year and tags."
    free = side.stream(prompt, tokens, time.perf_counter())
    if isinstance(side, Service):
        schema = {"type": "json_schema", "json_schema": {"name": "book", "schema": SCHEMA}}
        bound = side.stream(prompt, tokens, time.perf_counter(), response_format=schema)
    else:
        bound = side.stream(prompt, tokens, time.perf_counter(), json_schema=SCHEMA)
    return bound.decode_rate / free.decode_rate


def measure(side: Side, args: argparse.Namespace, history: str) -> dict[str, Any]:
    """Every figure of one side."""
    side.stream("Hi", 2, time.perf_counter())  # load the model
    figures: dict[str, Any] = {}
    for count in args.streams:
        rate, firsts = concurrent(side, count, args.tokens)
        figures[f"{count} streams"] = rate
        figures[f"{count} first"] = firsts
    figures["cold first"], figures["follow-up first"] = side.follow_up(history, 16)
    figures["constrained"] = constrained_ratio(side, args.tokens)
    return figures


def report(results: dict[str, dict[str, Any]], raw_rate: float, streams: Sequence[int]) -> None:
    """The table and the ratios against the goals."""
    names = list(results)
    print(f"{'':32}" + "".join(f"{name:>16}" for name in names))

    def row(label: str, value: Callable[[dict[str, Any]], str]) -> None:
        print(f"{label:32}" + "".join(f"{value(results[n]):>16}" for n in names))

    one = streams[0]
    for count in streams:
        row(f"{count} streams, tok/s (×{one})", partial(_rate, count=count, one=one))
        row("  first tokens, s (max)", partial(_latest_first, count=count))
    row("cold first turn, first token s", lambda r: f"{r['cold first']:.2f}")
    row("follow-up, first token s", lambda r: f"{r['follow-up first']:.2f}")
    row("follow-up / cold", lambda r: f"{r['follow-up first'] / r['cold first']:.2f}")
    row("constrained / free decode", lambda r: f"{r['constrained']:.2f}")
    service = results["service"]
    print(f"\nraw llama-cpp-python, 1 stream: {raw_rate:.1f} tok/s")
    print(f"service 1 stream / raw: {service[f'{one} streams'] / raw_rate:.2f}")
    print("goals: 4 streams >= 1.5x, 8 streams >= 2.2x the one-stream rate, follow-up <= 0.10 of")
    print("a cold first turn, constrained >= 0.8x free, one stream >= 0.97x raw")


def _latest_first(figures: dict[str, Any], count: int) -> str:
    return f"{max(figures[f'{count} first']):.2f}"


def _rate(figures: dict[str, Any], count: int, one: int) -> str:
    rate = figures[f"{count} streams"]
    return f"{rate:.1f} ({rate / figures[f'{one} streams']:.2f})"


def benchmark(args: argparse.Namespace, log_path: Path, scratch: Path) -> None:
    """Measure the service, llama-server when given, and raw llama-cpp-python; print it all."""
    settings = Settings.service_defaults()
    model = ModelCatalog().get(BUNDLED_MODEL_ID).path()
    # About 30 tokens per paragraph.
    history = "Summarize this log.\n" + PARAGRAPH * max(1, args.history // 30)
    results: dict[str, dict[str, Any]] = {}
    builds = {"service and raw": build_info()}
    extra = [f"--LocalEngine.parallel_requests={args.parallel}"] if args.parallel else []
    extra.append(f"--LocalEngine.speculation={args.speculation}")
    print(f"the service's speculation: {'on' if args.speculation else 'off'}")
    with running_server(log_path, extra=extra) as server:
        results["service"] = measure(Service(server), args, history)
    for number, binary in enumerate(args.llama_server):
        name = "llama-server" if number == 0 else f"llama-server {number + 1}"
        log = scratch / f"llama-server-{number}.log"
        with llama_server(binary, model, settings, log) as url:
            results[name] = measure(LlamaServer(url), args, history)
            builds[name] = f"{binary}: {build_flags(binary)}"
    raw = RawRunner(model, settings, f"Write a long story about {SUBJECTS[0]}.")
    raw.run(2)
    raw_rate = statistics.median(raw.run(args.tokens).tokens_per_s for _ in range(3))
    report(results, raw_rate, args.streams)
    for name, build in builds.items():
        print(f"{name}: {build}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="serving.py", description="Many streams, follow-up turns, constrained decoding."
    )
    parser.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    parser.add_argument(
        "--streams",
        type=lambda s: [int(n) for n in s.split(",")],
        default=[1, 4, 8],
        help="concurrent stream counts, comma-separated (the first is the baseline)",
    )
    parser.add_argument("--history", type=int, default=1900, help="tokens of the first turn")
    parser.add_argument("--parallel", type=int, help="the service's LocalEngine.parallel_requests")
    parser.add_argument(
        "--llama-server",
        type=Path,
        action="append",
        default=[],
        help="a llama-server binary to compare; repeat for another build (e.g. one without "
        "AVX-512): each is one more column",
    )
    parser.add_argument(
        "--speculation",
        action="store_true",
        help="the service's speculation on (its default), against llama-server without any",
    )
    parser.add_argument("--server-log", type=Path, help="keep the service's output here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    args = parse_args(argv)
    return run_benchmark(
        lambda scratch, log_path: benchmark(args, log_path, scratch), args.server_log
    )


if __name__ == "__main__":
    sys.exit(main())
