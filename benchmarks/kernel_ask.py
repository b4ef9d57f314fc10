"""``%lmsp ask`` in a real IPython kernel, end to end, against raw llama-cpp-python.

One prompt, the bundled model, greedy decoding and the service's default settings on both sides:

* raw: llama-cpp-python in this process, as ``stream_overhead.py`` drives it (same rendering);
* notebook: a kernel started with jupyter_client's ``KernelManager`` whose ``LMSP_URL`` and
  ``LMSP_TOKEN`` name a ``jupyter server`` (with the extension) this script starts; each run
  executes ``a = %lmsp ask ...`` then ``a.wait()``, timing the IOPub messages a front end gets.

One warm-up of each, then ``--rounds`` rounds of raw then notebook, never concurrently. It
measures and never asserts: the exit code is 0 whatever the numbers.

Run: ``.venv/bin/python benchmarks/kernel_ask.py [--tokens 128] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import zmq
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

if not __package__:  # run as a file: python benchmarks/kernel_ask.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.figures import Sample, median
from benchmarks.harness.meters import measured
from benchmarks.harness.raw import DEFAULT_PROMPT, RawRunner, Settings, print_context
from benchmarks.harness.server import running_server
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.kernel.display import TASK_MIME
from lmsp_jupyter.kernel.state import FINAL_STATUSES

DELTA = "response.output_text.delta"
DISPLAYS = ("display_data", "update_display_data")
TIMEOUT_MS = 300_000
Timed = list[tuple[float, dict[str, Any]]]  # (seconds since the execute request, message)


@dataclass(frozen=True)
class NotebookRun(Sample):
    """One ask seen from the front end: ``first_s``/``last_s`` are the widget ``events``
    messages carrying the first and last text deltas, ``end_s`` the final state's display."""

    reply_s: float = 0.0  # execute_reply of the asking cell: how long the magic blocks
    messages: int = 0  # widget ``events`` messages
    deltas: int = 0  # output_text deltas they carried
    displays: int = 0  # display_data and update_display_data, both cells
    input_tokens: int = 0


class NotebookSide:
    """A kernel with the extension loaded, asking through ``%lmsp ask``."""

    def __init__(self, client: BlockingKernelClient, prompt: str) -> None:
        self.client, self.prompt = client, prompt
        self.poller = zmq.Poller()
        self.poller.register(client.shell_channel.socket, zmq.POLLIN)
        self.poller.register(client.iopub_channel.socket, zmq.POLLIN)
        self.execute("%load_ext lmsp_jupyter\nimport json")

    def execute(self, code: str, until: Callable[[dict[str, Any]], bool] | None = None) -> Timed:
        """Run ``code``; the timed IOPub messages until the cell's idle and, if given, ``until``
        one of them, with its execute_reply as a message of type ``reply``."""
        start = time.perf_counter()
        msg_id = self.client.execute(code)
        timed: Timed = []
        idle, reply, done = False, False, until is None
        while not (idle and reply and done):
            ready = dict(self.poller.poll(TIMEOUT_MS))
            if not ready:
                raise RuntimeError(f"the kernel sent nothing for {TIMEOUT_MS / 1000:.0f} s")
            now = time.perf_counter() - start
            if self.client.shell_channel.socket in ready:
                message = self.client.shell_channel.get_msg(timeout=0)
                if message["parent_header"].get("msg_id") == msg_id:
                    if message["content"]["status"] != "ok":
                        raise RuntimeError("\n".join(message["content"].get("traceback", [])))
                    timed.append((now, {**message, "msg_type": "reply"}))
                    reply = True
            if self.client.iopub_channel.socket in ready:
                message = self.client.iopub_channel.get_msg(timeout=0)
                timed.append((now, message))
                mine = message["parent_header"].get("msg_id") == msg_id
                state = message["content"].get("execution_state")
                idle = idle or (mine and state == "idle")
                done = done or (until is not None and until(message))
        return timed

    def run(self, max_tokens: int) -> NotebookRun:
        """One ask, from the asking cell's request to its final state, then ``a.wait()``."""
        asked = self.execute(
            f"a = %lmsp ask --max-tokens {max_tokens} --temperature 0 {self.prompt}",
            until=lambda m: final_state(m) is not None,
        )
        waited = self.execute("a.wait(); print(json.dumps([a.status, a.text]))")
        status, text = json.loads(
            "".join(m["content"]["text"] for _, m in waited if m["content"].get("name") == "stdout")
        )
        end_s, state = next((t, s) for t, m in asked if (s := final_state(m)) is not None)
        if status not in ("completed", "incomplete"):
            raise RuntimeError(f"the ask ended {status}: {state.get('error')}")
        usage = state["rounds"][-1]["response"]["usage"]
        batches = [(t, events(m)) for t, m in asked if events(m)]
        times = [t for t, batch in batches if any(e["event"] == DELTA for e in batch)]
        return NotebookRun(
            tokens=usage["output_tokens"],
            first_s=times[0],
            last_s=times[-1],
            end_s=end_s,
            text=text,
            reply_s=next(t for t, m in asked if m["msg_type"] == "reply"),
            messages=len(batches),
            deltas=sum(e["event"] == DELTA for _, batch in batches for e in batch),
            displays=sum(m["msg_type"] in DISPLAYS for _, m in asked + waited),
            input_tokens=usage["input_tokens"],
        )


def events(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of a widget ``events`` custom message (none for any other message)."""
    data = message["content"].get("data", {}) if message["msg_type"] == "comm_msg" else {}
    content = data.get("content", {}) if data.get("method") == "custom" else {}
    return cast("list[dict[str, Any]]", content.get("events", [])) if content else []


def final_state(message: dict[str, Any]) -> dict[str, Any] | None:
    """The ask's state if ``message`` is a display update showing it ended."""
    if message["msg_type"] != "update_display_data":
        return None
    state: dict[str, Any] = message["content"]["data"].get(TASK_MIME, {})
    return state if state.get("status") in FINAL_STATUSES else None


def print_table(raw: list[Sample], notebook: list[NotebookRun]) -> None:
    """Per side the medians: tokens/s (end-to-end and decode-only) and time to first token."""
    print(f"\n{'side':<10}{'tokens':>7}{'tok/s e2e':>11}{'tok/s decode':>14}{'TTFT ms':>9}")
    sides: tuple[tuple[str, Sequence[Sample]], ...] = (("raw", raw), ("notebook", notebook))
    for name, samples in sides:
        counts = "/".join(str(n) for n in sorted({s.tokens for s in samples}))
        print(
            f"{name:<10}{counts:>7}{median(samples, lambda s: s.tokens_per_s):>11.1f}"
            f"{median(samples, lambda s: s.decode_tokens_per_s):>14.1f}"
            f"{median(samples, lambda s: s.ttft_ms):>9.1f}"
        )
    print(
        f"notebook (medians): cell reply {median(notebook, lambda n: n.reply_s * 1000):.1f} ms, "
        f"final state {median(notebook, lambda n: n.end_s):.2f} s, widget events messages "
        f"{median(notebook, lambda n: n.messages):.0f} for "
        f"{median(notebook, lambda n: n.deltas):.0f} deltas, display messages "
        f"{median(notebook, lambda n: n.displays):.0f}"
    )
    same = {s.text for s in raw} == {s.text for s in notebook}
    print(f"output text: {'the same' if same else 'DIFFERENT'} on both sides")


def print_ratios(raws: list[Sample], notebooks: list[NotebookRun]) -> None:
    """Notebook against raw: tokens/s and TTFT; deltas per widget message; background load."""
    decode = median(notebooks, lambda n: n.decode_tokens_per_s) / median(
        raws, lambda r: r.decode_tokens_per_s
    )
    e2e = median(notebooks, lambda n: n.tokens_per_s) / median(raws, lambda r: r.tokens_per_s)
    ttft = median(notebooks, lambda n: n.ttft_ms) - median(raws, lambda r: r.ttft_ms)
    per_message = sum(n.deltas for n in notebooks) / sum(n.messages for n in notebooks)
    print(f"\nratio notebook/raw decode tokens/s = {decode:.3f}   (end-to-end: {e2e:.3f})")
    print(f"TTFT notebook - raw = {ttft:.1f} ms")
    print(f"deltas per widget events message = {per_message:.1f}")
    load = median([*raws, *notebooks], lambda s: s.background)
    print(f"median background load: {load:.1%} of the machine (other processes)")


def benchmark(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
    """Start the server and the kernel, alternate the runs, print the results."""
    settings = Settings.service_defaults()
    model_path = ModelCatalog().get(BUNDLED_MODEL_ID).path()
    print_context(settings, model_path, args.prompt, args.tokens, args.rounds, prime=False)
    raw = RawRunner(model_path, settings, args.prompt)
    with running_server(log_path, app="server") as server:
        env = {**os.environ, "LMSP_URL": server.lmsp_url, "LMSP_TOKEN": server.token}
        manager = KernelManager(
            kernel_name="python3", connection_file=str(scratch / f"kernel-{uuid.uuid4()}.json")
        )
        manager.start_kernel(env=env, cwd=str(scratch))
        client = manager.client()
        try:  # the warm-ups, then the rounds
            client.start_channels()
            client.wait_for_ready(timeout=60)
            notebook = NotebookSide(client, args.prompt)
            ours = (server.pid, manager.provisioner.pid)  # type: ignore[union-attr]
            raw.run(args.tokens)
            notebook.run(args.tokens)
            raws: list[Sample] = []
            notebooks: list[NotebookRun] = []
            print("\nruns (alternating, sequential; decode tok/s, then TTFT):", flush=True)
            for index in range(args.rounds):
                r = measured(lambda: raw.run(args.tokens), *ours)
                n = measured(lambda: notebook.run(args.tokens), *ours)
                raws.append(r)
                notebooks.append(n)
                busy = max(r.background, n.background)
                print(
                    f"  round {index + 1}: raw {r.decode_tokens_per_s:5.1f} tok/s "
                    f"{r.ttft_ms:6.1f} ms | notebook {n.decode_tokens_per_s:5.1f} tok/s "
                    f"{n.ttft_ms:6.1f} ms, reply {n.reply_s * 1000:5.1f} ms, {n.messages:>3} "
                    f"messages/{n.deltas} deltas | background {busy:.0%}",
                    flush=True,
                )
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
    print(f"\nprompt tokens: raw {len(raw.prompt_tokens)}, notebook {notebooks[0].input_tokens}")
    print_table(raws, notebooks)
    print_ratios(raws, notebooks)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    parser = benchmark_parser(__doc__, tokens=128, rounds=3, prompt=DEFAULT_PROMPT)
    return benchmark_main(parser, benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
