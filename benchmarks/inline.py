"""Inline completions as the lab extension asks for them, replayed from a typing trace.

A notebook's code is typed at ``--cps`` characters a second into one growing prompt (the cells
so far, the current one up to the cursor). Whenever the typist pauses (at the end of a word or
a line) for longer than ``--debounce-ms``, a streamed ``POST /completions`` goes out, as the
extension sends it; the next keystroke aborts it if it is still running. Measured, from the
moment the request goes out: the first text character (the first ghost character) and the
whole suggestion, p50 and p95; the share of each prompt the service served from its prefix
cache (requests that ran to the end report it); how many requests were aborted. The same again
while a ``--ask-tokens`` answer streams (``%lmsp ask``), whose rate alone and beside the typing
is measured too. The typist does not wait for the suggestions: the trace's times are fixed.

It measures and never asserts: the exit code is 0 whatever the numbers.

Run: ``.venv/bin/python benchmarks/inline.py [--lines 40] [--cps 6] [--ask-tokens 512]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

if not __package__:  # run as a file: python benchmarks/inline.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.server import Server, running_server
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID

#: The notebook typed: plain Python, one line after another (repeated for more lines).
SOURCE = '''import math


def fibonacci(n):
    """The n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def is_prime(n):
    if n < 2:
        return False
    for k in range(2, int(math.sqrt(n)) + 1):
        if n % k == 0:
            return False
    return True


primes = [n for n in range(100) if is_prime(n)]
print(primes)
'''.splitlines()
#: The pause after a word and after a line, in keystrokes' worth of time.
WORD_PAUSE, LINE_PAUSE = 2.0, 4.0


@dataclass
class Outcome:
    """One completion request: when its first and last text came (s after it went out)."""

    first_s: float | None = None
    done_s: float | None = None
    aborted: bool = False
    prompt_tokens: int = 0
    cached_tokens: int = 0


@dataclass
class Replay:
    """What one replay of the trace measured."""

    outcomes: list[Outcome] = field(default_factory=list)

    def line(self, label: str) -> str:
        firsts = [o.first_s * 1000 for o in self.outcomes if o.first_s is not None]
        dones = [o.done_s * 1000 for o in self.outcomes if o.done_s is not None]
        counted = [o for o in self.outcomes if o.prompt_tokens]
        cached = sum(o.cached_tokens for o in counted) / max(
            1, sum(o.prompt_tokens for o in counted)
        )
        aborted = sum(o.aborted for o in self.outcomes)
        return (
            f"{label:<14} {len(self.outcomes):>8} {aborted:>7} {_pct(firsts, 50):>9} "
            f"{_pct(firsts, 95):>9} {_pct(dones, 50):>9} {_pct(dones, 95):>9} {cached:>8.0%}"
        )


def _pct(values: list[float], q: int) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.0f}"
    return f"{statistics.quantiles(values, n=100, method='inclusive')[q - 1]:.0f}"


def trace(lines: int, cps: float) -> list[tuple[float, str, bool]]:
    """(time s, the text typed so far, whether a pause follows) for every keystroke."""
    text, now, keys = "", 0.0, []
    for number in range(lines):
        line = SOURCE[number % len(SOURCE)] + "\n"
        for index, char in enumerate(line):
            text += char
            pause = 0.0
            if char == "\n":
                pause = LINE_PAUSE
            elif char == " " and index and not line[:index].isspace():
                pause = WORD_PAUSE
            keys.append((now, text, pause > 0))
            now += (1 + pause) / cps
    return keys


async def complete(http: httpx.AsyncClient, body: dict[str, object], outcome: Outcome) -> None:
    """Stream one completion, noting when its text came."""
    start = time.perf_counter()
    async with http.stream("POST", "/completions", json=body) as reply:
        async for line in reply.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["text"] and outcome.first_s is None:
                outcome.first_s = time.perf_counter() - start
            if chunk.get("usage"):
                outcome.prompt_tokens = chunk["usage"]["prompt_tokens"]
                details = chunk["usage"].get("prompt_tokens_details") or {}
                outcome.cached_tokens = details.get("cached_tokens", 0)
    outcome.done_s = time.perf_counter() - start


async def replay(server: Server, args: argparse.Namespace) -> Replay:
    """Type the trace; a request after each pause, aborted by the next keystroke."""
    measured = Replay()
    debounce = args.debounce_ms / 1000
    async with httpx.AsyncClient(
        base_url=server.lmsp_url, headers=server.headers, timeout=300
    ) as http:
        running: asyncio.Task[None] | None = None
        outcome = Outcome()
        start = time.perf_counter()
        for at, text, pause in trace(args.lines, args.cps):
            await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
            if running is not None and not running.done():
                running.cancel()
                outcome.aborted = True
            running = None
            if not pause:
                continue
            await asyncio.sleep(debounce)
            body = {
                "model": BUNDLED_MODEL_ID,
                "prompt": text[-args.context_chars :],
                "suffix": "",
                "max_tokens": args.max_tokens,
                "temperature": 0,
                "stop": ["\n\n\n"],
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            outcome = Outcome()
            measured.outcomes.append(outcome)
            running = asyncio.create_task(complete(http, body, outcome))
        if running is not None:
            await asyncio.gather(running, return_exceptions=True)
    return measured


async def ask(server: Server, tokens: int) -> float:
    """A streamed answer of ``tokens`` tokens (``%lmsp ask``'s kind); its tokens a second."""
    body = {
        "model": BUNDLED_MODEL_ID,
        "input": "Once upon a time, in a small village,",
        "max_output_tokens": tokens,
        "temperature": 0,
        "stream": True,
    }
    async with httpx.AsyncClient(
        base_url=server.lmsp_url, headers=server.headers, timeout=600
    ) as http:
        first = last = None
        deltas = 0
        async with http.stream("POST", "/responses", json=body) as reply:
            async for line in reply.aiter_lines():
                if line == "event: response.output_text.delta":
                    last = time.perf_counter()
                    first = first or last
                    deltas += 1
    if first is None or last is None or deltas < 2:
        return 0.0
    return (deltas - 1) / (last - first)


async def run(server: Server, args: argparse.Namespace) -> None:
    alone = await ask(server, args.ask_tokens)
    print(f"typing {args.lines} lines at {args.cps:g} chars/s, debounce {args.debounce_ms} ms")
    print(
        f"{'':<14} {'requests':>8} {'aborted':>7} {'first p50':>9} {'first p95':>9} "
        f"{'done p50':>9} {'done p95':>9} {'cached':>8}"
    )
    print((await replay(server, args)).line("typing alone"))
    beside, asked = await asyncio.gather(replay(server, args), ask(server, args.ask_tokens))
    print(beside.line("beside an ask"))
    print(
        f"ask of {args.ask_tokens} tokens: {alone:.1f} tok/s alone, {asked:.1f} tok/s beside "
        f"the typing ({asked / alone if alone else 0:.2f}x)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__ or "", server_log=True)
    parser.add_argument("--lines", type=int, default=40, help="lines of code typed")
    parser.add_argument("--cps", type=float, default=6.0, help="characters typed a second")
    parser.add_argument("--debounce-ms", type=int, default=200, help="pause before a request")
    parser.add_argument("--max-tokens", type=int, default=32, help="max_tokens of a suggestion")
    parser.add_argument("--context-chars", type=int, default=4500, help="prompt characters kept")
    parser.add_argument("--ask-tokens", type=int, default=512, help="tokens of the ask beside")

    def body(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
        with running_server(log_path) as server:
            asyncio.run(run(server, args))

    return benchmark_main(parser, body, argv)


if __name__ == "__main__":
    sys.exit(main())
