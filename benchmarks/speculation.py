"""Speculation (n-gram drafts from the context, and predicted outputs) on vs off vs raw
llama-cpp-python, on a task set kept in the repository.

In this process, with the bundled model, greedy: the tasks of ``speculation_tasks.json`` (code
edits, extraction and quoting from a passage, JSON/CSV continuation, follow-up turns that
repeat an earlier answer, and a free-form control set) through the service
(``ResponseService`` on a ``LocalEngine``, no HTTP) with speculation on and off, and raw
llama-cpp-python on the same rendered prompts. Code edits run twice on the on side: without and
with ``prediction`` = the original code. Each side runs every task ``--rounds`` times,
alternating sides; printed per task kind: the median decode rate of each side (output tokens
after the first over the time from the first to the last), on/off and on/raw, and the share of
output tokens that came from drafts; then ``--streams`` concurrent streams of the whole set,
aggregate tokens/s with speculation on and off. The texts must be the same on and off (a
``FAIL`` line if not). Goals: grounded kinds one stream >= 2x raw, edits with a prediction
>= 3x raw, free-form >= 0.98x off, several streams >= 0.98x off.

With ``--llama-server PATH``: the same rendered prompts through llama-server's ``/completion``
on the same GGUF, speculation off and each n-gram mode of :data:`LLAMA_MODES` (``--spec-type``;
``--llama-modes`` picks some), one stream and ``--streams`` at once; a second table gives per
kind llama-server's best mode, its acceptance rate and the service's rate over it (goal for
the grounded set >= 1.3).

Run: ``.venv/bin/python benchmarks/speculation.py [--tokens 128] [--rounds 3] [--streams 4,8]
[--llama-server PATH]`` on an otherwise idle machine.

``--passes`` counts instead of timing, so it gives the same figures on a busy machine: each task
through the service with speculation on and off, one stream, recording every forward pass after
the prompt (``LlamaModel.decode``); printed per kind: the decoding passes on and off, output
tokens per pass, draft tokens verified and rejected, and the speedup the engine's pass cost
model (``engine/speculation.py``, with ``LOGITS_MS`` for each verified draft token) estimates
from those passes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: python benchmarks/speculation.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.figures import Sample, num
from benchmarks.harness.llama_server import llama_server
from benchmarks.harness.raw import RawRunner, Settings
from benchmarks.serving import LlamaServer
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.engine.generation import CancelToken
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.llama.model import BatchToken, LlamaModel
from lmsp_jupyter.engine.local.llama.runtime import model_output_tile
from lmsp_jupyter.engine.local.speculation import LOGITS_MS, own_pass_ms, shared_pass_ms
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from lmsp_jupyter.protocol.events import OutputTextDelta
from lmsp_jupyter.protocol.models import EXTENSION_KEY
from lmsp_jupyter.protocol.requests import parse_response_request
from lmsp_jupyter.service.models import ModelDirectory
from lmsp_jupyter.service.responses import ResponseService

TASKS = Path(__file__).with_name("speculation_tasks.json")
#: Kinds whose answers repeat their context: the goal of 2x raw is theirs.
GROUNDED = ("code_edit", "extraction", "json_csv", "follow_up")
#: llama-server's n-gram speculation (``--spec-type``, no draft model), each with its own
#: defaults (lookup n-grams of 12 to 24 tokens) and with short lookups and drafts (the tasks'
#: prompts are short; llama-cpp-python documents 2 drafted tokens as best on CPUs); ``off``
#: is always run, as the baseline.
LLAMA_MODES: dict[str, list[str]] = {
    "off": [],
    "ngram-simple": ["--spec-type", "ngram-simple"],
    "ngram-simple n3 m8": [
        *("--spec-type", "ngram-simple"),
        *("--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8"),
    ],
    "ngram-map-k": ["--spec-type", "ngram-map-k"],
    "ngram-map-k n3 m8": [
        *("--spec-type", "ngram-map-k"),
        *("--spec-ngram-map-k-size-n", "3", "--spec-ngram-map-k-size-m", "8"),
    ],
    "ngram-map-k4v": ["--spec-type", "ngram-map-k4v"],
    "ngram-mod": ["--spec-type", "ngram-mod"],
    "ngram-mod n4": [
        *("--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "4"),
        *("--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "8"),
    ],
    "ngram-cache": ["--spec-type", "ngram-cache"],
}


class Side:
    """The service on an engine with speculation on or off."""

    def __init__(self, speculation: bool) -> None:
        self.engine = LocalEngine(EngineSettings(speculation=speculation))
        catalog = ModelCatalog(include_bundled=True)
        self.service = ResponseService(ModelDirectory(catalog, self.engine), self.engine)

    async def run(self, body: dict[str, Any]) -> tuple[Sample, int, str]:
        """One answer: its timing, the output tokens that came from drafts, and its prompt."""
        start = time.perf_counter()
        run = await self.service.start(parse_response_request(body))
        times: list[float] = []
        pieces: list[str] = []
        async for event in self.service.events(run, CancelToken()):
            if isinstance(event.data, OutputTextDelta):
                times.append(time.perf_counter() - start)
                pieces.append(event.data.delta)
        usage = run.usage
        if usage is None or not times:
            raise RuntimeError(f"no answer: {run.error}")
        drafted = usage.extensions[EXTENSION_KEY].accepted_draft_tokens if usage.extensions else 0
        end = time.perf_counter() - start
        sample = Sample(usage.output_tokens, times[0], times[-1], end, text="".join(pieces))
        return sample, drafted, run.prompt.text

    def close(self) -> None:
        self.engine.close()


def bodies(tasks: list[dict[str, Any]], answers: dict[int, str], tokens: int) -> list[Any]:
    """(kind, request body) of each task, and each code edit again with its prediction."""
    out: list[tuple[str, dict[str, Any]]] = []
    for index, task in enumerate(tasks):
        items: list[dict[str, Any]] = []
        if "first" in task:
            items += [
                {"type": "message", "role": "user", "content": task["first"]},
                {"type": "message", "role": "assistant", "content": answers[index]},
            ]
        items.append({"type": "message", "role": "user", "content": task["input"]})
        body = {
            "model": BUNDLED_MODEL_ID,
            "input": items,
            "temperature": 0,
            "max_output_tokens": tokens,
        }
        out.append((task["kind"], body))
        if "prediction" in task:
            prediction = {"type": "content", "content": task["prediction"]}
            predicted = {**body, "extensions": {EXTENSION_KEY: {"prediction": prediction}}}
            out.append((task["kind"] + "+prediction", predicted))
    return out


async def first_turns(side: Side, tasks: list[dict[str, Any]], tokens: int) -> dict[int, str]:
    """The answers of the follow-up tasks' first turns (not timed)."""
    answers: dict[int, str] = {}
    for index, task in enumerate(tasks):
        if "first" in task:
            body = {
                "model": BUNDLED_MODEL_ID,
                "input": task["first"],
                "temperature": 0,
                "max_output_tokens": tokens,
            }
            answers[index] = (await side.run(body))[0].text
    return answers


async def one_stream(
    tasks: list[dict[str, Any]], tokens: int, rounds: int, model_path: Path
) -> tuple[dict[str, dict[str, list[float]]], list[tuple[str, str]]]:
    """Per kind and side, the decode rates (and the ``drafted`` shares of the on side); and
    (kind, rendered prompt) of every task, for llama-server."""
    on, off = Side(True), Side(False)
    raw = RawRunner(model_path, Settings.service_defaults(), "")
    figures: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    prompts: dict[int, tuple[str, str]] = {}
    try:
        work = bodies(tasks, await first_turns(off, tasks, tokens), tokens)
        for _ in range(rounds):
            for number, (kind, body) in enumerate(work):
                on_sample, drafted, prompt = await on.run(body)
                prompts[number] = (kind, prompt)
                off_sample, _, _ = await off.run(body)
                raw.prompt_tokens = raw.llm.tokenize(prompt.encode(), add_bos=False, special=True)
                raw_sample = raw.run(tokens)
                if on_sample.text != off_sample.text:
                    print(f"FAIL: {kind}: the text differs with speculation on and off")
                for side, sample in (("on", on_sample), ("off", off_sample), ("raw", raw_sample)):
                    if sample.tokens > 1:
                        figures[kind][side].append(sample.decode_tokens_per_s)
                figures[kind]["drafted"].append(drafted / max(1, on_sample.tokens))
    finally:
        on.close()
        off.close()
    return figures, list(prompts.values())


async def many_streams(tasks: list[dict[str, Any]], tokens: int, streams: int) -> list[float]:
    """Aggregate tokens/s of the task set in groups of ``streams`` at once, on and off."""
    rates: list[float] = []
    for speculation in (True, False):
        side = Side(speculation)
        try:
            work = bodies(tasks, await first_turns(side, tasks, tokens), tokens)
            generated, start = 0, time.perf_counter()
            for first in range(0, len(work), streams):
                group = work[first : first + streams]
                done = await asyncio.gather(*(side.run(body) for _, body in group))
                generated += sum(sample.tokens for sample, _, _ in done)
            rates.append(generated / (time.perf_counter() - start))
        finally:
            side.close()
    return rates


#: A forward pass: (sequence, position, whether its logits are kept) of each of its tokens.
Pass = list[tuple[int, int, bool]]


@contextmanager
def recorded_passes() -> Iterator[list[Pass]]:
    """Every forward pass of every ``LlamaModel`` while in the block."""
    passes: list[Pass] = []
    decode = LlamaModel.decode

    def recording(model: LlamaModel, tokens: Sequence[BatchToken], block: bool = False) -> None:
        passes.append([(t.sequence, t.position, t.logits) for t in tokens])
        decode(model, tokens, block)

    LlamaModel.decode = recording  # type: ignore[method-assign,assignment]
    try:
        yield passes
    finally:
        LlamaModel.decode = decode  # type: ignore[method-assign]


def decoding_cost(passes: list[Pass], tile: int) -> tuple[int, int, float]:
    """Of one stream's passes, those after the one that read its prompt's last token (the
    first to keep logits): how many, the tokens whose logits they kept, and their cost in the
    engine's model for kernels of ``tile`` rows, in ms, with what the logits of a
    verification's draft tokens add."""
    count, rows, cost = 0, 0, 0.0
    prompt_read = False
    for items in passes:
        kept = [sequence for sequence, _, logits in items if logits]
        if not prompt_read:
            prompt_read = bool(kept)
            continue
        count, rows = count + 1, rows + len(kept)
        sequences = len(set(kept))
        drafted = len(kept) - 1 if sequences == 1 else 0
        cost += shared_pass_ms(sequences, tile) if sequences > 1 else own_pass_ms(drafted, tile)
        cost += LOGITS_MS * drafted
    return count, rows, cost


async def count_passes(tasks: list[dict[str, Any]], tokens: int) -> dict[str, dict[str, float]]:
    """Per kind, summed with speculation on and off: output tokens, decoding passes, tokens
    they verified (logits kept), draft tokens kept, and the passes' cost (ms, the engine's
    model)."""
    sides = {True: Side(True), False: Side(False)}
    tile = model_output_tile(ModelCatalog(include_bundled=True).get(BUNDLED_MODEL_ID).path())
    figures: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    try:
        work = bodies(tasks, await first_turns(sides[False], tasks, tokens), tokens)
        for kind, body in work:
            texts = []
            for speculation, side in sides.items():
                with recorded_passes() as passes:
                    sample, drafted, _ = await side.run(body)
                count, rows, cost = decoding_cost(passes, tile)
                name = "on" if speculation else "off"
                for key, value in (
                    ("tokens", sample.tokens),
                    ("passes", count),
                    ("rows", rows),
                    ("kept", drafted),
                    ("ms", cost),
                ):
                    figures[kind][f"{name} {key}"] += value
                texts.append(sample.text)
            if texts[0] != texts[1]:
                print(f"FAIL: {kind}: the text differs with speculation on and off")
    finally:
        for side in sides.values():
            side.close()
    return figures


def llama_modes(selected: str) -> dict[str, list[str]]:
    """The llama-server modes run: :data:`LLAMA_MODES` named in ``selected`` (all if empty)."""
    names = [name.strip() for name in selected.split(",") if name.strip()] or list(LLAMA_MODES)
    unknown = [name for name in names if name not in LLAMA_MODES]
    if unknown:
        raise RuntimeError(f"unknown --llama-modes {unknown}; known: {list(LLAMA_MODES)}")
    return {name: LLAMA_MODES[name] for name in ["off", *names] if name in LLAMA_MODES}


@dataclass
class ModeFigures:
    """One llama-server mode: per kind the decode rates, drafted and accepted draft tokens and
    output tokens; per stream count the aggregate rate."""

    rates: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    drafted: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    accepted: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    streams: dict[int, float] = field(default_factory=dict)


def measure_mode(
    url: str, prompts: list[tuple[str, str]], args: argparse.Namespace, streams: list[int]
) -> ModeFigures:
    """The task set through one llama-server: ``--rounds`` one stream at a time (the kinds
    with a prediction left out: llama-server takes none), then in groups of each ``streams``."""
    server, figures = LlamaServer(url), ModeFigures()
    plain = [(kind, prompt) for kind, prompt in prompts if not kind.endswith("+prediction")]
    server.stream_text("Hi", 2, time.perf_counter())  # load the model
    for _ in range(args.rounds):
        for kind, prompt in plain:
            stream = server.stream_text(
                prompt, args.tokens, time.perf_counter(), cache_prompt=False
            )
            if stream.tokens > 1:
                figures.rates[kind].append(stream.decode_rate)
            figures.drafted[kind] += stream.drafted
            figures.accepted[kind] += stream.accepted
    for count in streams:
        generated, start = 0, time.perf_counter()
        with ThreadPoolExecutor(count) as pool:
            for first in range(0, len(plain), count):
                group = plain[first : first + count]
                done = pool.map(
                    lambda item: server.stream_text(item[1], args.tokens, time.perf_counter()),
                    group,
                )
                generated += sum(stream.tokens for stream in done)
        figures.streams[count] = generated / (time.perf_counter() - start)
    return figures


def measure_llama_server(
    args: argparse.Namespace, prompts: list[tuple[str, str]], model: Path, scratch: Path
) -> dict[str, ModeFigures]:
    """Every selected mode, each in a llama-server of its own on the same GGUF; a mode that
    does not start is reported and left out."""
    streams = [int(n) for n in args.streams.split(",") if n]
    slots = max([1, *streams])
    results: dict[str, ModeFigures] = {}
    for name, extra in llama_modes(args.llama_modes).items():
        log = scratch / f"llama-server-{name.replace(' ', '_')}.log"
        try:
            with llama_server(
                args.llama_server, model, Settings.service_defaults(), log, slots=slots, extra=extra
            ) as url:
                results[name] = measure_mode(url, prompts, args, streams)
        except RuntimeError as error:
            print(f"llama-server {name} ({' '.join(extra)}): not measured: {error}")
    return results


def _kinds(kind: str) -> tuple[str, ...]:
    """The kinds a row of the table stands for: ``grounded`` is every grounded kind."""
    return GROUNDED if kind == "grounded" else (kind,)


def report_llama_server(
    figures: dict[str, dict[str, list[float]]],
    modes: dict[str, ModeFigures],
    service_streams: dict[int, float],
) -> None:
    """Per kind: llama-server off, its best n-gram mode, that mode's acceptance, and the
    service's speculation on against that best; then the streams against llama-server's best."""
    if "off" not in modes:
        return
    print(f"\nllama-server, same GGUF, same run; modes: {', '.join(modes)}")
    print("kind                 ll off  ll best  best mode            accept  drafted  on/best")
    for kind, sides in figures.items():
        if kind.endswith("+prediction"):
            continue
        kinds = _kinds(kind)
        rates = {
            name: _median([r for k in kinds for r in mode.rates[k]]) for name, mode in modes.items()
        }
        tried = [name for name in rates if name != "off" and not math.isnan(rates[name])]
        best = max(tried, key=rates.__getitem__, default="off")
        mode = modes[best]
        drafted, accepted = (
            sum(counts[k] for k in kinds) for counts in (mode.drafted, mode.accepted)
        )
        answers = max(1, sum(len(mode.rates[k]) for k in kinds))
        accept = accepted / drafted if drafted else float("nan")
        on = _median(sides["on"])
        print(
            f"{kind:<20} {rates['off']:6.1f}  {rates[best]:7.1f}  {best:<20} "
            f"{num(accept, '.0%'):>6}  {accepted / answers:7.1f}  {on / rates[best]:7.2f}"
        )
    for count, on in service_streams.items():
        rates = {name: mode.streams[count] for name, mode in modes.items()}
        best = max(rates, key=rates.__getitem__)
        print(
            f"{count} streams, tok/s   service on {on:6.1f}  llama-server off "
            f"{rates['off']:6.1f}  best {best} {rates[best]:6.1f}  on/best {on / rates[best]:5.2f}"
        )
    print("goal: grounded on/best >= 1.3. accept: accepted / drafted tokens of the best mode;")
    print("drafted: its accepted draft tokens an answer; prediction kinds: llama-server has none")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def print_passes(tasks: list[dict[str, Any]], tokens: int) -> None:
    """Count the passes of each task on and off and print their figures per kind."""
    figures = asyncio.run(count_passes(tasks, tokens))
    print(f"model {BUNDLED_MODEL_ID}, {len(tasks)} tasks, greedy, one stream")
    print(f"at most {tokens} tokens an answer; sums over each kind's answers; passes after the")
    print("prompt's; estimated: the engine's pass cost model (+ LOGITS_MS a draft token), off/on")
    print(
        "kind                 tokens  passes off  passes on  tok/pass  drafted  rejected  estimated"
    )
    for kind, f in figures.items():
        drafted = f["on rows"] - f["on passes"]
        print(
            f"{kind:<20} {f['on tokens']:6.0f}  {f['off passes']:10.0f}  {f['on passes']:9.0f}"
            f"  {f['off passes'] / max(1, f['on passes']):8.2f}  {drafted:7.0f}"
            f"  {drafted - f['on kept']:8.0f}  {f['off ms'] / max(1, f['on ms']):8.2f}x"
        )


def with_grounded(figures: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, list[float]]]:
    """``figures`` and a ``grounded`` row: the values of every grounded kind together."""
    grounded: dict[str, list[float]] = defaultdict(list)
    for kind in GROUNDED:
        for side, values in figures.get(kind, {}).items():
            grounded[side] += values
    return {**figures, "grounded": grounded}


def benchmark(args: argparse.Namespace, scratch: Path, _log_path: Path) -> None:
    """Measure and print the tables."""
    tasks: list[dict[str, Any]] = []
    for task in json.loads(TASKS.read_text())["tasks"]:
        if not args.tasks or sum(t["kind"] == task["kind"] for t in tasks) < args.tasks:
            tasks.append(task)
    if args.passes:
        print_passes(tasks, args.tokens)
        return
    model_path = ModelCatalog(include_bundled=True).get(BUNDLED_MODEL_ID).path()
    figures, prompts = asyncio.run(one_stream(tasks, args.tokens, args.rounds, model_path))
    figures = with_grounded(figures)
    print(f"model {BUNDLED_MODEL_ID}, {len(tasks)} tasks, {args.rounds} rounds, greedy")
    print(f"at most {args.tokens} tokens an answer; decode tok/s, medians")
    print("kind                  raw     off      on   on/off  on/raw  drafted")
    for kind, sides in figures.items():
        raw, off, on = (_median(sides[side]) for side in ("raw", "off", "on"))
        drafted = _median(sides["drafted"])
        print(
            f"{kind:<20} {raw:6.1f}  {off:6.1f}  {on:6.1f}  {on / off:6.2f}  {on / raw:6.2f}"
            f"  {drafted:6.0%}"
        )
    service_streams: dict[int, float] = {}
    for streams in (int(n) for n in args.streams.split(",") if n):
        on, off = asyncio.run(many_streams(tasks, args.tokens, streams))
        service_streams[streams] = on
        print(f"{streams} streams, tok/s   on {on:6.1f}  off {off:6.1f}  on/off {on / off:5.2f}")
    print(f"goals: {', '.join(GROUNDED)} on/raw >= 2; code_edit+prediction on/raw >= 3;")
    print("       free on/off >= 0.98; streams on/off >= 0.98")
    print("drafted: output tokens verified from drafts (accepted draft tokens / output tokens)")
    if args.llama_server is not None:
        modes = measure_llama_server(args, prompts, model_path, scratch)
        report_llama_server(figures, modes, service_streams)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    parser = benchmark_parser(__doc__, tokens=128, rounds=3)
    parser.add_argument("--streams", default="4,8", help="concurrent streams, comma-separated")
    parser.add_argument(
        "--tasks", type=int, default=0, help="only the first N tasks of each kind (0: all)"
    )
    parser.add_argument(
        "--passes", action="store_true", help="count passes on and off instead of timing"
    )
    parser.add_argument(
        "--llama-server", type=Path, help="a llama-server binary: its n-gram modes side by side"
    )
    parser.add_argument(
        "--llama-modes",
        default="",
        help=f"llama-server modes, comma-separated (default: all of {', '.join(LLAMA_MODES)})",
    )
    return benchmark_main(parser, benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
