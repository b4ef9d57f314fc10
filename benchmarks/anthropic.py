"""Anthropic's Messages API against LMSP on the same service, and Claude Code's turns.

One ``jupyter lmsp`` server, the bundled model, greedy decoding:

* messages: the same user message, model and ``--tokens`` streamed through Anthropic's
  ``POST /lmsp/anthropic/v1/messages`` (its ``text_delta`` events) and LMSP's
  ``POST /lmsp/v1/responses``; after one warm-up of each, ``--rounds`` rounds of messages then
  responses, never two at once. Prints per side the median tokens/s (end-to-end and
  decode-only) and time to first token, whether the text is the same on both sides, and the
  ratio messages/responses (goal >= 0.97);
* Claude Code (``tests/compat/js``'s ``claude``, after ``npm ci`` there; ``--claude PATH`` for
  another): ``claude -p`` twice in one session (``--resume``), without tools, greedy and stopped
  at a line end (``CLAUDE_CODE_EXTRA_BODY``, as tests/compat/test_claude_code.py runs it), each
  turn streamed (``--output-format stream-json --include-partial-messages``). Prints each
  turn's time to its first text and its prompt tokens read from the prefix cache, then the
  ratio of the second turn's time to first token to the first's (the cache should make it
  small). Skipped, with a line saying so, when no ``claude`` is found.

It measures and never asserts: the exit code is 0 whatever the numbers.

Run: ``.venv/bin/python benchmarks/anthropic.py [--tokens 128] [--rounds 5] [--claude PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

if not __package__:  # run as a file: python benchmarks/anthropic.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.figures import median
from benchmarks.harness.raw import DEFAULT_PROMPT
from benchmarks.harness.server import REPOSITORY, Server, running_server
from benchmarks.harness.sse import iter_events
from benchmarks.remote import alternate, lmsp_stream, print_side
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID

TARGET_RATIO = 0.97
#: Claude Code as the compat tests install it.
CLAUDE = REPOSITORY / "tests" / "compat" / "js" / "node_modules" / ".bin" / "claude"
#: Greedy, and stopped at the first line end: a base model's turn ends.
EXTRA_BODY = {"temperature": 0, "stop_sequences": ["\n"]}


def messages_stream(client: httpx.Client, server: Server, body: dict[str, object]) -> Iterator[str]:
    """The text deltas of a streamed Messages answer."""
    url = f"{server.base_url}/lmsp/anthropic/v1/messages"
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for event in iter_events(response):
            data = json.loads(event.data)
            if event.event == "error":
                raise RuntimeError(f"the Messages stream failed: {data['error']}")
            if event.event == "content_block_delta" and data["delta"]["type"] == "text_delta":
                yield data["delta"]["text"]


def measure_messages(client: httpx.Client, server: Server, args: argparse.Namespace) -> None:
    """Alternate the two sides and print their rates and the ratio."""
    messages_body = {
        "model": BUNDLED_MODEL_ID,
        "max_tokens": args.tokens,
        "temperature": 0,
        "messages": [{"role": "user", "content": args.prompt}],
        "stream": True,
    }
    responses_body = {
        "model": BUNDLED_MODEL_ID,
        "input": args.prompt,
        "temperature": 0,
        "max_output_tokens": args.tokens,
        "stream": True,
    }
    sides: dict[str, Callable[[], Iterator[str]]] = {
        "messages": lambda: messages_stream(client, server, messages_body),
        "responses": lambda: lmsp_stream(client, server, responses_body),
    }
    samples = alternate(sides, args.rounds, server.pid)
    print(f"messages: {args.rounds} rounds of {args.tokens} tokens, prompt {args.prompt!r}")
    for name, side in samples.items():
        print_side(name, side)
    texts = {sample.text for side in samples.values() for sample in side}
    print(f"output text: {'the same' if len(texts) == 1 else 'DIFFERENT'} on both sides")
    ratio = median(samples["messages"], lambda s: s.tokens_per_s) / median(
        samples["responses"], lambda s: s.tokens_per_s
    )
    verdict = "PASS" if ratio >= TARGET_RATIO else "MISS"
    print(f"ratio messages/responses tok/s: {ratio:.3f}   (goal >= {TARGET_RATIO}: {verdict})")


@dataclass(frozen=True)
class Turn:
    """One ``claude -p`` turn: seconds to its first text, in all, and its usage."""

    first_s: float
    total_s: float
    session_id: str
    usage: dict[str, int]


def claude_turn(claude: Path, server: Server, home: Path, prompt: str, *resume: str) -> Turn:
    """Run one turn of Claude Code, streamed, timing its first text delta."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))},
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": f"{server.base_url}/lmsp/anthropic",
        "ANTHROPIC_AUTH_TOKEN": server.token,
        "ANTHROPIC_MODEL": BUNDLED_MODEL_ID,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": BUNDLED_MODEL_ID,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "64",
        "CLAUDE_CODE_EXTRA_BODY": json.dumps(EXTRA_BODY),
    }
    command = [
        str(claude),
        *("-p", prompt, "--tools", "", "--output-format", "stream-json"),
        *("--verbose", "--include-partial-messages", *resume),
    ]
    started = time.perf_counter()
    first = None
    result: dict[str, object] = {}
    with subprocess.Popen(
        command, cwd=home, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            message = json.loads(line)
            event = message.get("event") or {}
            if first is None and event.get("type") == "content_block_delta":
                first = time.perf_counter() - started
            if message.get("type") == "result":
                result = message
    total = time.perf_counter() - started
    if process.returncode != 0 or result.get("is_error"):
        raise RuntimeError(f"claude failed ({process.returncode}): {result}")
    usage = result["usage"]
    assert isinstance(usage, dict)
    return Turn(first if first is not None else total, total, str(result["session_id"]), usage)


def measure_claude_code(server: Server, args: argparse.Namespace, scratch: Path) -> None:
    """Two turns of one Claude Code session: the second's time to first token against the
    first's."""
    claude: Path = args.claude
    if not claude.exists():
        print(f"claude code: not measured, {claude} is missing (npm ci in tests/compat/js)")
        return
    home = scratch / "claude-home"
    home.mkdir()
    first = claude_turn(claude, server, home, "Say hello.")
    second = claude_turn(claude, server, home, "Say it again.", "--resume", first.session_id)
    print("claude code: two turns of one session, no tools")
    for name, turn in (("first", first), ("second", second)):
        print(
            f"  {name:<6} turn  TTFT s {turn.first_s:7.2f}  total s {turn.total_s:7.2f}"
            f"  input tokens {turn.usage['input_tokens']:6d}"
            f"  read from cache {turn.usage['cache_read_input_tokens']:6d}"
        )
    print(f"ratio second/first turn TTFT: {second.first_s / first.first_s:.3f}")


def benchmark(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
    """Start the service; measure the Messages stream, then Claude Code's turns."""
    with (
        running_server(log_path) as server,
        httpx.Client(timeout=600, headers=server.headers) as client,
    ):
        measure_messages(client, server, args)
        measure_claude_code(server, args, scratch)


def command_line() -> argparse.ArgumentParser:
    """The command line."""
    parser = benchmark_parser(__doc__, tokens=128, rounds=5, prompt=DEFAULT_PROMPT, server_log=True)
    parser.add_argument(
        "--claude", type=Path, default=CLAUDE, help="the claude binary (default: the compat one)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    return benchmark_main(command_line(), benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
