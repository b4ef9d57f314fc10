"""Overhead of LMSP in front of a remote OpenAI-compatible engine.

The bundled model runs in a third-party server (llama-cpp-python's ``llama_cpp.server``, or
``llama-server`` with ``--llama-server PATH``) that this script starts; ``jupyter lmsp`` is
started beside it with ``EngineRouter.remote_servers`` naming it. Runs alternate, never at the same
time, after one warm-up of each side:

* direct: ``POST {remote}/v1/chat/completions`` with ``"stream": true``, its content chunks;
* LMSP: ``POST /lmsp/v1/responses`` with ``"stream": true`` for ``remote/gemma``, its
  ``response.output_text.delta`` events.

Prints per side the median tokens/s (end-to-end and decode-only) and time to first token, then
the ratio LMSP/direct and the first-token overhead. It measures and never asserts.

Run: ``.venv/bin/python benchmarks/remote.py [--tokens 128] [--rounds 5] [--llama-server PATH]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import httpx

if not __package__:  # run as a file: python benchmarks/remote.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.figures import Sample, median, num
from benchmarks.harness.llama_cpp_server import MODULE as LLAMA_CPP_SERVER
from benchmarks.harness.meters import measured
from benchmarks.harness.raw import DEFAULT_PROMPT
from benchmarks.harness.server import Server, free_port, running_process, running_server
from benchmarks.harness.sse import iter_events
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog

ALIAS = "gemma"
CONTEXT = 2048


def remote_command(binary: str | None, model: Path, port: int, threads: int) -> list[str]:
    """The third-party server's command line."""
    if binary:
        return [
            binary,
            *("--model", str(model), "--alias", ALIAS, "--host", "127.0.0.1"),
            *("--port", str(port), "--ctx-size", str(CONTEXT), "--threads", str(threads)),
            "--jinja",
            "--no-repack",  # as the service loads the model: repacking crashes on AMX CPUs
        ]
    return [
        sys.executable,
        *("-m", LLAMA_CPP_SERVER, "--model", str(model), "--model_alias", ALIAS),
        *("--chat_format", "gemma", "--host", "127.0.0.1", "--port", str(port)),
        *("--n_ctx", str(CONTEXT), "--n_threads", str(threads), "--verbose", "false"),
        *("--interrupt_requests", "false"),
    ]


def timed(stream: Callable[[], Iterator[str]]) -> Sample:
    """Time the text pieces ``stream`` yields."""
    started = time.perf_counter()
    first = last = 0.0
    pieces: list[str] = []
    for piece in stream():
        last = time.perf_counter() - started
        if not pieces:
            first = last
        pieces.append(piece)
    end = time.perf_counter() - started
    return Sample(len(pieces), first, last, end, text="".join(pieces))


def alternate(
    sides: dict[str, Callable[[], Iterator[str]]], rounds: int, server_pid: int
) -> dict[str, list[Sample]]:
    """One untimed warm-up of each side, then ``rounds`` rounds of the sides in turn, each
    sample with the share of the machine others took (not this process, not ``server_pid``)."""
    for stream in sides.values():
        timed(stream)
    samples: dict[str, list[Sample]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, stream in sides.items():
            samples[name].append(measured(partial(timed, stream), server_pid))
    return samples


def direct_stream(client: httpx.Client, url: str, body: dict[str, object]) -> Iterator[str]:
    """The content chunks of a streamed Chat Completion straight from the remote."""
    with client.stream("POST", f"{url}/chat/completions", json=body) as response:
        response.raise_for_status()
        for event in iter_events(response):
            if event.data == "[DONE]":
                return
            for choice in json.loads(event.data).get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    yield content


def lmsp_stream(client: httpx.Client, server: Server, body: dict[str, object]) -> Iterator[str]:
    """The text deltas of a streamed LMSP response through the remote."""
    with client.stream("POST", f"{server.lmsp_url}/responses", json=body) as response:
        response.raise_for_status()
        for event in iter_events(response):
            if event.event == "response.output_text.delta":
                yield json.loads(event.data)["delta"]


def print_side(name: str, samples: list[Sample]) -> None:
    print(
        f"{name:<8} tokens {median(samples, lambda s: s.tokens):>6.0f}"
        f"  tok/s {num(median(samples, lambda s: s.tokens_per_s), '8.1f')}"
        f"  decode tok/s {num(median(samples, lambda s: s.decode_tokens_per_s), '8.1f')}"
        f"  TTFT ms {median(samples, lambda s: s.first_s) * 1000:8.1f}"
    )


def benchmark(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
    model = ModelCatalog().get(BUNDLED_MODEL_ID).path()
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    command = remote_command(args.llama_server, model, port, args.threads)
    config = scratch / "lmsp_config.json"
    servers = [{"name": "remote", "url": url, "context_length": CONTEXT}]
    config.write_text(json.dumps({"EngineRouter": {"remote_servers": servers}}))
    direct_body = {
        "model": ALIAS,
        "messages": [{"role": "user", "content": args.prompt}],
        "temperature": 0,
        "max_tokens": args.tokens,
        "stream": True,
    }
    lmsp_body = {
        "model": f"remote/{ALIAS}",
        "input": args.prompt,
        "temperature": 0,
        "max_output_tokens": args.tokens,
        "stream": True,
    }
    with (
        running_process(command, scratch / "remote.log", f"{url}/models"),
        running_server(log_path, extra=[f"--config={config}"]) as server,
        httpx.Client(timeout=600, headers=server.headers) as client,
    ):
        sides: dict[str, Callable[[], Iterator[str]]] = {
            "direct": lambda: direct_stream(client, url, direct_body),
            "lmsp": lambda: lmsp_stream(client, server, lmsp_body),
        }
        for stream in sides.values():  # warm-up
            timed(stream)
        samples: dict[str, list[Sample]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, stream in sides.items():
                samples[name].append(timed(stream))
    print(f"remote: {'llama-server' if args.llama_server else 'llama_cpp.server'}, {model.name}")
    print(f"{args.rounds} rounds of {args.tokens} tokens, prompt {args.prompt!r}")
    for name, side in samples.items():
        print_side(name, side)
    ratio = median(samples["lmsp"], lambda s: s.tokens_per_s) / median(
        samples["direct"], lambda s: s.tokens_per_s
    )
    overhead = median(samples["lmsp"], lambda s: s.first_s) - median(
        samples["direct"], lambda s: s.first_s
    )
    print(f"ratio lmsp/direct tok/s: {ratio:.3f}   first-token overhead: {overhead * 1000:.1f} ms")


def command_line() -> argparse.ArgumentParser:
    """The command line."""
    parser = benchmark_parser(__doc__, tokens=128, rounds=5, prompt=DEFAULT_PROMPT, server_log=True)
    parser.add_argument("--threads", type=int, default=2, help="the remote server's threads")
    parser.add_argument("--llama-server", help="a llama-server binary instead of llama_cpp.server")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    return benchmark_main(command_line(), benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
