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
import contextlib
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, cast

import httpx
import llama_cpp

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.server.app import LmspApp

DEFAULT_PROMPT = "Write a long story about a lighthouse keeper."
TARGET_RATIO = 0.97
TARGET_OVERHEAD_MS = 10.0
STARTUP_TIMEOUT_S = 120.0
FINAL_EVENTS = ("response.completed", "response.incomplete")
ENDED_EVENTS = (*FINAL_EVENTS, "response.failed", "response.cancelled", "error")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Settings:
    """The service's default model settings, read from the ``LmspApp`` traits."""

    context_size: int
    threads: int
    batch_size: int

    @classmethod
    def service_defaults(cls) -> Settings:
        """The defaults ``jupyter lmsp`` runs with when given no configuration."""
        traits = LmspApp.class_traits()
        return cls(
            context_size=traits["context_size"].default_value,
            threads=traits["threads"].default_value,
            batch_size=traits["batch_size"].default_value,
        )


@dataclass(frozen=True)
class Sample:
    """One timed generation; times are seconds since the call (or request) started.

    ``first_s`` and ``last_s`` are the arrivals of the first and the last token, ``end_s`` that
    of the end of the stream (the final event; the closing chunk of llama-cpp-python).
    ``background`` is the share of the machine's CPU other processes used meanwhile.
    """

    tokens: int
    first_s: float
    last_s: float
    end_s: float
    text: str = field(default="", repr=False)
    background: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        """End-to-end rate: prompt processing included."""
        return self.tokens / self.end_s

    @property
    def decode_tokens_per_s(self) -> float:
        """Decode-only rate: the tokens after the first over the time from first to last."""
        span = self.last_s - self.first_s
        return (self.tokens - 1) / span if span > 0 else float("nan")

    @property
    def ttft_ms(self) -> float:
        """Time to first token in milliseconds."""
        return self.first_s * 1000


def render_prompt(text: str) -> str:
    """The prompt as the service renders one user message for Gemma (its fallback template)."""
    return f"<bos><start_of_turn>user\n{text.strip()}<end_of_turn>\n<start_of_turn>model\n"


class RawRunner:
    """The bundled model in this process, driven through llama-cpp-python's streaming API."""

    def __init__(self, model_path: Path, settings: Settings, prompt: str) -> None:
        self.llm = llama_cpp.Llama(
            model_path=str(model_path),
            n_ctx=settings.context_size,
            n_threads=settings.threads,
            n_threads_batch=settings.threads,
            n_batch=settings.batch_size,
            verbose=False,
        )
        self.prompt_tokens = self.llm.tokenize(
            render_prompt(prompt).encode(), add_bos=False, special=True
        )

    def run(self, max_tokens: int) -> Sample:
        """Stream one completion; each chunk carrying a token counts as one token."""
        # Evaluate the whole prompt, as the service does for every request, rather than reuse
        # the cached prefix of the previous run.
        self.llm.reset()  # type: ignore[no-untyped-call]
        first, last = 0.0, 0.0
        pieces: list[str] = []
        start = time.perf_counter()
        stream = cast(
            "Iterator[dict[str, Any]]",
            self.llm.create_completion(
                prompt=self.prompt_tokens, max_tokens=max_tokens, temperature=0, stream=True
            ),
        )
        for count, chunk in enumerate(stream):  # each chunk but the closing one is a token
            now = time.perf_counter() - start
            if chunk["choices"][0]["finish_reason"] is not None:
                return Sample(count, first, last, now, text="".join(pieces))
            first = first or now
            last = now
            pieces.append(chunk["choices"][0]["text"])
        raise RuntimeError("llama-cpp-python ended the stream without a closing chunk")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_command(port: int, token: str, root_dir: str, app: str = "lmsp") -> list[str]:
    """``jupyter lmsp`` (or ``jupyter server``, which loads the extension too) with a fixed
    port and token, and no model stores but the bundled one."""
    script = Path(sys.executable).with_name(f"jupyter-{app}")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "jupyter", app]
    command += [
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root_dir}",
        "--LmspApp.ollama_dir=",
        "--LmspApp.huggingface_cache_dir=",
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")
    return command


@dataclass(frozen=True)
class Server:
    """A running ``jupyter lmsp``."""

    base_url: str
    token: str
    pid: int


@contextlib.contextmanager
def running_server(log_path: Path, app: str = "lmsp") -> Iterator[Server]:
    """Start ``jupyter {app}``, yield it once it answers, and always stop it."""
    port, token = free_port(), secrets.token_hex(16)
    with tempfile.TemporaryDirectory() as root, log_path.open("wb") as log:
        # Its own session and no stdin: Ctrl-C reaches only this script, which then stops it.
        process = subprocess.Popen(
            server_command(port, token, root, app),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_until_ready(base_url, token, process)
            yield Server(base_url, token, process.pid)
        finally:
            stop(process)


def wait_until_ready(base_url: str, token: str, process: subprocess.Popen[bytes]) -> None:
    """Poll ``GET /lmsp/v1`` until it returns 200; fail if the server exits or never answers."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    headers = {"Authorization": f"Bearer {token}"}
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base_url}/lmsp/v1", headers=headers, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the server did not answer within {STARTUP_TIMEOUT_S:.0f} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Ask the server to stop (SIGTERM), then kill it if it lingers."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class ServiceClient:
    """Streams responses from the service and times their SSE events."""

    def __init__(self, base_url: str, token: str, prompt: str) -> None:
        self.client = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=300
        )
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
            for name, data in sse_events(response.iter_lines()):
                now = time.perf_counter() - start
                if name == "response.output_text.delta":
                    first = first or now
                    last = now
                    deltas.append(data)  # parsed after the stream, not while it is timed
                elif name in ENDED_EVENTS:
                    return self._final(name, data, deltas, Sample(0, first, last, now))
        raise RuntimeError("the stream ended without a final event")

    def _final(self, name: str, data: str, deltas: list[str], times: Sample) -> Sample:
        """The sample of a stream that ended with event ``name``: its tokens and its text."""
        if name not in FINAL_EVENTS:
            raise RuntimeError(f"the stream ended with {name}: {data}")
        usage: dict[str, Any] = json.loads(data)["usage"]
        self.input_tokens = usage["input_tokens"]
        text = "".join(json.loads(delta)["delta"] for delta in deltas)
        return replace(times, tokens=usage["output_tokens"], text=text)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self.client.close()


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """``(event, data)`` pairs of an SSE stream; comments and ids are skipped."""
    name, data = "message", ""
    for line in lines:
        if not line:
            if data:
                yield name, data
            name, data = "message", ""
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()


class CpuMeter:
    """Measures what other processes take from this machine while a run goes on.

    On a shared machine another workload halves the tokens/s of whichever side it overlaps, so
    each run records the CPU that neither this process nor the server used, as a fraction of the
    whole machine (busy and stolen time from ``/proc/stat``; 0 where there is no ``/proc``).
    """

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid

    def measure(self, run: Callable[[], Sample]) -> Sample:
        """Call ``run`` and attach the background load seen while it ran."""
        before, ours_before, wall_before = self._busy(), self._ours(), time.perf_counter()
        sample = run()
        wall = time.perf_counter() - wall_before
        others = (self._busy() - before) - (self._ours() - ours_before)
        return replace(sample, background=max(others, 0.0) / (wall * (os.cpu_count() or 1)))

    @staticmethod
    def _busy() -> float:
        try:
            fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        except (OSError, ValueError):
            return 0.0
        user, nice, system, _idle, _iowait, irq, softirq, steal = fields
        return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS

    def _ours(self) -> float:
        own = os.times()
        try:
            fields = Path(f"/proc/{self.server_pid}/stat").read_text().rsplit(")", 1)[1].split()
            server = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        except (OSError, ValueError, IndexError):
            server = 0.0
        return own.user + own.system + server


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


def timed_run(side: Side, plan: Plan, meter: CpuMeter) -> Sample:
    """One measured run of ``side``, after an untimed one-token run when priming."""
    if plan.prime:
        side.run(1)
    return meter.measure(lambda: side.run(plan.tokens))


def alternate(raw: Side, service: Side, plan: Plan, meter: CpuMeter) -> Rounds:
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
        pair = timed_run(raw, plan, meter), timed_run(service, plan, meter)
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


def median(samples: list[Sample], metric: Callable[[Sample], float]) -> float:
    """The median of ``metric`` over ``samples``."""
    return statistics.median(metric(sample) for sample in samples)


def print_context(settings: Settings, args: argparse.Namespace, model_path: Path) -> None:
    """The machine and settings the numbers belong to."""
    print(f"cpu_count            : {os.cpu_count()}")
    print(
        f"threads (gen/batch)  : {settings.threads}/{settings.threads} "
        f"(llama-cpp-python's own default: {max((os.cpu_count() or 2) // 2, 1)})"
    )
    print(f"n_ctx / n_batch      : {settings.context_size} / {settings.batch_size}")
    print(f"llama_cpp            : {llama_cpp.__version__}")
    print(f"model                : {BUNDLED_MODEL_ID} ({model_path.name})")
    print(f"prompt               : {args.prompt!r}")
    print(f"max tokens / rounds  : {args.tokens} / {args.rounds} (+1 warm-up each)")
    print(f"priming              : {'off' if args.no_prime else 'a one-token run before each'}")


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


def spread(values: list[float], spec: str) -> str:
    """``median (quartiles low to high)`` of ``values``, each formatted with ``spec``."""
    if len(values) < 2:
        return format(values[0], spec)
    low, mid, high = statistics.quantiles(values, n=4, method="inclusive")
    return f"{mid:{spec}} (quartiles {low:{spec}} to {high:{spec}})"


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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128, help="tokens to generate per run")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds of each side")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="the user message")
    parser.add_argument(
        "--max-background",
        type=float,
        default=5.0,
        metavar="PERCENT",
        help="re-run a round when other processes took more than this share "
        "of the machine's CPU meanwhile (default: 5)",
    )
    parser.add_argument(
        "--no-prime",
        action="store_true",
        help="time each run right after the other side's, without the untimed one-token run "
        "of the same side that otherwise precedes it",
    )
    parser.add_argument(
        "--server-log",
        type=Path,
        default=None,
        help="where the server's output goes (default: a temporary file)",
    )
    return parser.parse_args(argv)


def benchmark(args: argparse.Namespace, log_path: Path) -> None:
    """Load both sides, alternate the runs and print the results."""
    settings = Settings.service_defaults()
    model_path = ModelCatalog().get(BUNDLED_MODEL_ID).path()
    print_context(settings, args, model_path)
    raw = RawRunner(model_path, settings, args.prompt)
    with running_server(log_path) as server:
        service = ServiceClient(server.base_url, server.token, args.prompt)
        plan = Plan(args.tokens, args.rounds, args.max_background / 100, not args.no_prime)
        try:
            print("\nruns (alternating, sequential; TTFT after tok/s):", flush=True)
            rounds = alternate(raw, service, plan, CpuMeter(server.pid))
        finally:
            service.close()
    print(f"\nprompt tokens: raw {len(raw.prompt_tokens)}, service {service.input_tokens}")
    print_rounds(rounds, args.rounds)
    print_table(rounds)
    ratio, overhead = print_summary(rounds)
    print_targets(ratio, overhead)


def terminate(signum: int, frame: object) -> None:
    """SIGTERM: leave through the ``finally`` blocks, which stop the server."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, terminate)
    with tempfile.TemporaryDirectory() as scratch:
        log_path = args.server_log or Path(scratch) / "server.log"
        try:
            benchmark(args, log_path)
        except KeyboardInterrupt:
            print("\ninterrupted", file=sys.stderr)
            return 130
        except (RuntimeError, httpx.HTTPError) as exc:
            print(f"\nbenchmark failed: {exc}", file=sys.stderr)
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
