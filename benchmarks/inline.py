"""Inline completions as the lab extension asks for them, replayed from a typing trace; with
``--llama-server PATH``, the same trace against llama-server's ``/infill`` and ``/v1/completions``.

A notebook of ``--lines`` lines of code is typed at ``--cps`` characters a second, cell after
cell (a blank line starts a new cell), below cells already there that fill the extension's
context budget (``--context-tokens``, its ``contextTokens`` setting: about 1,500 tokens).
Whenever the typist pauses (at the end of a word or a line) for longer than ``--debounce-ms``
(the extension's ``debouncerDelay``), a suggestion is asked for; the next keystroke aborts it
if it is still running. The typist does not wait for the suggestions: the trace's times are
fixed. Each side gets the same trace:

* ``service``: ``POST /lmsp/v1/completions`` with the body the extension sends
  (``labextension/src/inline/``: ``promptParts``' prompt and suffix, ``max_tokens``,
  ``temperature`` 0, ``stop``, ``stream``), plus ``stream_options.include_usage`` to read
  the cached share;
* ``llama /infill``: llama-server's ``/infill`` as llama.vim sends it (the cells above as
  ``input_extra`` chunks, the current cell's lines above the cursor as ``input_prefix``, the
  cursor's line as ``prompt``, ``input_suffix``, ``n_indent``, its samplers, ``cache_prompt``),
  streamed so that the first character can be timed, with no ``t_max_predict_ms`` (which would
  cut suggestions short); llama-server started with ``--cache-reuse 256`` as llama.vim asks;
* ``llama /v1/completions``: the extension's prompt to llama-server's OpenAI Completions.

Both servers load the same GGUF: a copy of the bundled model whose metadata names three of its
unused tokens as fill-in-the-middle tokens (``/infill`` refuses a model without them; the
service then fills in the middle too). The suggestions' text means nothing; the timing does.

Measured, from the moment a request goes out: the first text character (the first ghost
character) and the whole suggestion, p50 and p95; the share of each prompt served from the
prefix cache (requests that ran to the end: the service's ``cached_tokens``, llama-server's
``timings.cache_n``); how many requests were aborted; tokens per suggestion. The same again
while a ``--ask-tokens`` answer streams (``%lmsp ask``; llama-server's ``/completion`` with the
same rendered prompt) on the same server, whose decode rate alone and beside the typing is
measured. Goals (issue 24): first ghost character p50 <= 150 ms, p95 <= 300 ms; >= 90 % of
each prompt from cache; the ask beside the typing >= 0.9x its rate alone.

It measures and never asserts: the exit code is 0 whatever the numbers.

Run: ``.venv/bin/python benchmarks/inline.py [--lines 40] [--cps 6] [--ask-tokens 512]
[--llama-server PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

if not __package__:  # run as a file: python benchmarks/inline.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.llama_server import llama_server
from benchmarks.harness.raw import Settings
from benchmarks.harness.server import running_server
from benchmarks.serving import LlamaServer, Service, Side
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.engine.fim import FIM_KEYS
from tests.conftest import FIM_IDS
from tests.engine.gguf_files import with_metadata

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
#: The extension's ``CHARS_PER_TOKEN`` (labextension/src/inline/context.ts).
CHARS_PER_TOKEN = 3
#: What the extension sends besides the prompt (``LmspInlineProvider.fetch``).
STOP = ["\n\n\n"]
#: llama.vim's sampling fields of an ``/infill`` request.
LLAMA_VIM_SAMPLING = {"top_k": 40, "top_p": 0.99, "samplers": ["top_k", "top_p", "infill"]}
#: The ask streamed beside the typing.
ASK_PROMPT = "Once upon a time, in a small village,"


@dataclass(frozen=True)
class Keystroke:
    """The notebook after one keystroke: its time (s), the code cells above the current one,
    the current cell up to the cursor (the cursor is at its end), and whether a pause follows."""

    at: float
    above: tuple[str, ...]
    before: str
    pause: bool


@dataclass(frozen=True)
class Parts:
    """What the extension sends: ``promptParts``' prompt and suffix, and the pieces they are
    made of (the cells above kept, the current cell's text before the cursor kept)."""

    prompt: str
    suffix: str
    cells: tuple[str, ...]
    before: str


def cell_part(source: str) -> str:
    """A code cell above as the prompt holds it (``cellPart``)."""
    source = source.rstrip()
    return f"{source}\n\n" if source else ""


def keep_end(text: str, budget: int) -> str:
    """``keepEnd``: the end of ``text`` in at most ``budget`` characters, cut in steps of a
    quarter of the budget and then at the next line start."""
    if len(text) <= budget:
        return text
    step = max(1, budget // 4)
    cut = -(-(len(text) - budget) // step) * step
    line = text.find("\n", cut)
    return text[line + 1 :] if line >= 0 and line + 1 < len(text) else text[cut:]


def keep_start(text: str, budget: int) -> str:
    """``keepStart``: the start of ``text`` in at most ``budget`` characters, at a line end."""
    if len(text) <= budget:
        return text
    line = text.rfind("\n", 0, budget + 1)
    return text[: line if line > 0 else budget]


def prompt_parts(above: tuple[str, ...], before: str, after: str, budget_tokens: int) -> Parts:
    """``promptParts`` of labextension/src/inline/context.ts, for code cells."""
    budget = max(1, budget_tokens) * CHARS_PER_TOKEN
    suffix = keep_start(after, budget // 4)
    room = budget - len(suffix)
    parts = [part for part in map(cell_part, above) if part]
    over = sum(map(len, parts)) + len(before) - room
    step = max(1, room // 4)
    cut = -(-over // step) * step if over > 0 else 0
    dropped = 0
    while parts and dropped < cut:
        dropped += len(parts.pop(0))
    kept = keep_end(before, room)
    return Parts("".join(parts) + kept, suffix, tuple(parts), kept)


def cells_of(lines: list[str]) -> list[str]:
    """The cells of ``lines``: blocks between blank lines."""
    return [block.strip("\n") for block in "\n".join(lines).split("\n\n") if block.strip()]


def trace(lines: int, cps: float, context_tokens: int) -> list[Keystroke]:
    """Every keystroke of typing ``lines`` lines of :data:`SOURCE` (cycled) into new cells
    below cells that fill ``context_tokens`` of context already."""
    above: list[str] = []
    while sum(len(cell_part(cell)) for cell in above) < context_tokens * CHARS_PER_TOKEN:
        above += cells_of(SOURCE)
    cell, now, keys = "", 0.0, []
    for number in range(lines):
        line = SOURCE[number % len(SOURCE)]
        if not line.strip():  # a blank line: on to a new cell
            if cell.strip():
                above.append(cell)
                cell = ""
            now += LINE_PAUSE / cps
            continue
        line += "\n"
        for index, char in enumerate(line):
            cell += char
            pause = 0.0
            if char == "\n":
                pause = LINE_PAUSE
            elif char == " " and index and not line[:index].isspace():
                pause = WORD_PAUSE
            keys.append(Keystroke(now, tuple(above), cell, pause > 0))
            now += (1 + pause) / cps
    return keys


@dataclass
class Outcome:
    """One completion request: when its first and last text came (s after it went out)."""

    first_s: float | None = None
    done_s: float | None = None
    aborted: bool = False
    prompt_tokens: int = 0
    cached_tokens: int = 0
    tokens: int = 0


@dataclass
class Replay:
    """What one replay of the trace measured."""

    outcomes: list[Outcome] = field(default_factory=list)

    def first_p50(self) -> float:
        """The median first-character time in ms (NaN when none came)."""
        firsts = [o.first_s * 1000 for o in self.outcomes if o.first_s is not None]
        return statistics.median(firsts) if firsts else float("nan")

    def line(self, label: str) -> str:
        firsts = [o.first_s * 1000 for o in self.outcomes if o.first_s is not None]
        dones = [o.done_s * 1000 for o in self.outcomes if o.done_s is not None]
        counted = [o for o in self.outcomes if o.prompt_tokens]
        cached = sum(o.cached_tokens for o in counted) / max(
            1, sum(o.prompt_tokens for o in counted)
        )
        prompt = statistics.median(o.prompt_tokens for o in counted) if counted else 0
        finished = [o.tokens for o in self.outcomes if o.done_s is not None]
        tokens = statistics.mean(finished) if finished else 0.0
        aborted = sum(o.aborted for o in self.outcomes)
        return (
            f"{label:<38} {len(self.outcomes):>8} {aborted:>7} {_pct(firsts, 50):>9} "
            f"{_pct(firsts, 95):>9} {_pct(dones, 50):>9} {_pct(dones, 95):>9} {cached:>7.0%} "
            f"{prompt:>7.0f} {tokens:>6.1f}"
        )


HEADER = (
    f"{'':<38} {'requests':>8} {'aborted':>7} {'first p50':>9} {'first p95':>9} "
    f"{'done p50':>9} {'done p95':>9} {'cached':>7} {'prompt':>7} {'tokens':>6}"
)


def _pct(values: list[float], q: int) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.0f}"
    return f"{statistics.quantiles(values, n=100, method='inclusive')[q - 1]:.0f}"


#: One suggestion: ``suggest(http, parts, outcome)`` streams it and fills ``outcome`` in.
Suggest = Callable[[httpx.AsyncClient, Parts, Outcome], Coroutine[Any, Any, None]]


async def stream_lines(
    http: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    outcome: Outcome,
    read: Callable[[dict[str, Any], Outcome], str],
) -> None:
    """POST ``body`` to ``path`` and read its ``data:`` lines with ``read`` (which returns the
    text of a chunk and notes its counts), timing the first text and the end."""
    start = time.perf_counter()
    async with http.stream("POST", path, json=body) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if not line.startswith("data: {"):
                continue
            if read(json.loads(line[6:]), outcome) and outcome.first_s is None:
                outcome.first_s = time.perf_counter() - start
    outcome.done_s = time.perf_counter() - start


def read_completion_chunk(chunk: dict[str, Any], outcome: Outcome) -> str:
    """An OpenAI Completions chunk (the service's, llama-server's): its text; the usage (the
    service's ``cached_tokens``) or llama-server's ``timings`` of the last chunk."""
    text = chunk["choices"][0].get("text", "") if chunk.get("choices") else ""
    outcome.tokens += bool(text)
    if usage := chunk.get("usage"):
        outcome.prompt_tokens = usage["prompt_tokens"]
        outcome.tokens = usage.get("completion_tokens", outcome.tokens)
        details = usage.get("prompt_tokens_details") or {}
        outcome.cached_tokens = details.get("cached_tokens", outcome.cached_tokens)
    read_timings(chunk, outcome)
    return str(text)


def read_infill_chunk(chunk: dict[str, Any], outcome: Outcome) -> str:
    """A llama-server ``/infill`` (``/completion``) chunk: its text; the counts of the last."""
    text = chunk.get("content", "")
    outcome.tokens += bool(text)
    if chunk.get("stop"):
        outcome.tokens = chunk.get("tokens_predicted", outcome.tokens)
    read_timings(chunk, outcome)
    return str(text)


def read_timings(chunk: dict[str, Any], outcome: Outcome) -> None:
    """llama-server's ``timings``: ``cache_n`` prompt tokens from cache, ``prompt_n`` read."""
    if timings := chunk.get("timings"):
        cached, read = timings.get("cache_n", 0), timings.get("prompt_n", 0)
        outcome.prompt_tokens, outcome.cached_tokens = cached + read, cached


def service_suggest(model: str, max_tokens: int) -> Suggest:
    """The extension's request to the service."""

    async def suggest(http: httpx.AsyncClient, parts: Parts, outcome: Outcome) -> None:
        body = {
            "model": model,
            "prompt": parts.prompt,
            "suffix": parts.suffix,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stop": STOP,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        await stream_lines(http, "/completions", body, outcome, read_completion_chunk)

    return suggest


def llama_completions_suggest(max_tokens: int) -> Suggest:
    """The extension's prompt to llama-server's OpenAI Completions (no FIM there)."""

    async def suggest(http: httpx.AsyncClient, parts: Parts, outcome: Outcome) -> None:
        body = {
            "prompt": parts.prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stop": STOP,
            "stream": True,
            "stream_options": {"include_usage": True},
            "cache_prompt": True,
        }
        await stream_lines(http, "/v1/completions", body, outcome, read_completion_chunk)

    return suggest


def infill_body(parts: Parts, max_tokens: int) -> dict[str, Any]:
    """An ``/infill`` request as llama.vim makes it from the same context: the cells above as
    extra chunks, the current cell above the cursor's line as the prefix, the line as
    ``prompt``."""
    head, _, line = parts.before.rpartition("\n")
    prefix = f"{head}\n" if head else ""
    chunks = [{"filename": f"cell{n}.py", "text": cell} for n, cell in enumerate(parts.cells)]
    return {
        "input_prefix": prefix,
        "input_suffix": parts.suffix,
        "input_extra": chunks,
        "prompt": line,
        "n_predict": max_tokens,
        "n_indent": len(line) - len(line.lstrip(" ")),
        **LLAMA_VIM_SAMPLING,
        "stream": True,
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
    }


def infill_suggest(max_tokens: int) -> Suggest:
    """llama.vim's request to llama-server's ``/infill``."""

    async def suggest(http: httpx.AsyncClient, parts: Parts, outcome: Outcome) -> None:
        await stream_lines(
            http, "/infill", infill_body(parts, max_tokens), outcome, read_infill_chunk
        )

    return suggest


async def replay(http: httpx.AsyncClient, suggest: Suggest, args: argparse.Namespace) -> Replay:
    """Type the trace; a request after each pause, aborted by the next keystroke."""
    measured = Replay()
    debounce = args.debounce_ms / 1000
    running: asyncio.Task[None] | None = None
    outcome = Outcome()
    start = time.perf_counter()
    for key in trace(args.lines, args.cps, args.context_tokens):
        await asyncio.sleep(max(0.0, start + key.at - time.perf_counter()))
        if running is not None and not running.done():
            running.cancel()
            outcome.aborted = True
        running = None
        if not key.pause:
            continue
        await asyncio.sleep(debounce)
        outcome = Outcome()
        measured.outcomes.append(outcome)
        parts = prompt_parts(key.above, key.before, "", args.context_tokens)
        running = asyncio.create_task(suggest(http, parts, outcome))
    if running is not None:
        await asyncio.gather(running, return_exceptions=True)
    return measured


async def ask_rate(side: Side, tokens: int, **options: Any) -> float:
    """The decode rate of a streamed ``tokens``-token answer (``%lmsp ask``'s kind)."""
    stream = await asyncio.to_thread(
        side.stream, ASK_PROMPT, tokens, time.perf_counter(), **options
    )
    return stream.decode_rate


async def measure_side(
    name: str,
    base_url: str,
    headers: dict[str, str],
    suggest: Suggest,
    ask: Callable[[], Awaitable[float]] | None,
    args: argparse.Namespace,
) -> tuple[Replay, float, float]:
    """One side: a warm-up suggestion, the replay alone, the ask alone, the replay beside the
    ask; the rows printed; returns the replay alone and the ask's rates alone and beside."""
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=300) as http:
        first = trace(args.lines, args.cps, args.context_tokens)[0]
        await suggest(
            http, prompt_parts(first.above, first.before, "", args.context_tokens), Outcome()
        )
        alone = await replay(http, suggest, args)
        print(alone.line(f"{name}, alone"))
        if ask is None:
            return alone, float("nan"), float("nan")
        ask_alone = await ask()
        beside, ask_beside = await asyncio.gather(replay(http, suggest, args), ask())
        print(beside.line(f"{name}, beside an ask"))
    return alone, ask_alone, ask_beside


def fim_model(scratch: Path) -> Path:
    """The bundled model with FIM tokens in its metadata, alone in a directory (model ``model``)."""
    bundled = ModelCatalog().get(BUNDLED_MODEL_ID).path()
    return with_metadata(
        bundled, scratch / "fim" / "model.gguf", dict(zip(FIM_KEYS, FIM_IDS, strict=True))
    )


async def run(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
    model = fim_model(scratch)
    config = scratch / "lmsp_config.json"
    config.write_text(json.dumps({"LmspApp": {"model_dirs": [str(model.parent)]}}))
    model_id = model.stem
    print(
        f"typing {args.lines} lines at {args.cps:g} chars/s, debounce {args.debounce_ms} ms, "
        f"context {args.context_tokens} tokens, {args.max_tokens} tokens a suggestion, "
        f"model {model_id} (the bundled model with FIM tokens)"
    )
    print(HEADER)
    asks: dict[str, tuple[float, float]] = {}
    firsts: dict[str, float] = {}
    with running_server(log_path, extra=[f"--config={config}"]) as server:
        service = Service(server)
        alone, *rates = await measure_side(
            "service",
            server.lmsp_url,
            server.headers,
            service_suggest(model_id, args.max_tokens),
            lambda: ask_rate(service, args.ask_tokens, model=model_id),
            args,
        )
        firsts["service"], asks["service"] = alone.first_p50(), (rates[0], rates[1])
    if args.llama_server is not None:
        settings = Settings.service_defaults()
        log = scratch / "llama-server.log"
        with llama_server(
            args.llama_server, model, settings, log, extra=("--cache-reuse", "256")
        ) as url:
            other = LlamaServer(url)
            for name, suggest in (
                ("llama /infill", infill_suggest(args.max_tokens)),
                ("llama /v1/completions", llama_completions_suggest(args.max_tokens)),
            ):
                alone, *rates = await measure_side(
                    name, url, {}, suggest, lambda: ask_rate(other, args.ask_tokens), args
                )
                firsts[name], asks[name] = alone.first_p50(), (rates[0], rates[1])
    for name, (ask_alone, ask_beside) in asks.items():
        print(
            f"{name}: ask of {args.ask_tokens} tokens {ask_alone:.1f} tok/s alone, "
            f"{ask_beside:.1f} beside the typing ({ask_beside / ask_alone:.2f}x)"
        )
    for name, first in firsts.items():
        if name != "service":
            print(f"first ghost character p50, service / {name}: {firsts['service'] / first:.2f}")
    print("goals: first p50 <= 150 ms, p95 <= 300 ms; cached >= 90 %; ask beside >= 0.9x alone")


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__ or "", server_log=True)
    parser.add_argument("--lines", type=int, default=40, help="lines of code typed")
    parser.add_argument("--cps", type=float, default=6.0, help="characters typed a second")
    parser.add_argument("--debounce-ms", type=int, default=200, help="pause before a request")
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens of a suggestion")
    parser.add_argument(
        "--context-tokens", type=int, default=1500, help="the extension's context budget"
    )
    parser.add_argument("--ask-tokens", type=int, default=512, help="tokens of the ask beside")
    parser.add_argument(
        "--llama-server", type=Path, help="a llama-server binary to replay the trace against"
    )

    def body(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
        asyncio.run(run(args, scratch, log_path))

    return benchmark_main(parser, body, argv)


if __name__ == "__main__":
    sys.exit(main())
