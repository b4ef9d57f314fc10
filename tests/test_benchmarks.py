"""Every benchmark runs end to end with tiny sizes: it exits 0 and prints its tables.

The figures of such short runs mean nothing and are not checked; what is checked is that each
script still measures: its server starts and stops, its table headers appear, and the
invariants it checks itself hold (no ``FAIL`` line, the same text on both sides).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

#: The header of the per-side table of stream_overhead and kernel_ask.
SIDES_HEADER = "side tokens tok/s e2e tok/s decode TTFT ms"
#: The table header of inline.py.
INLINE_HEADER = "requests aborted first p50 first p95 done p50 done p95 cached prompt tokens"
#: name: (tiny arguments, table headers (the words of a whole line), starts of other lines)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "constrained": ("--tokens 4 --rounds 1", [], ["unconstrained ", "constrained ", "ratio "]),
    "inline": (
        "--lines 2 --cps 30 --max-tokens 4 --ask-tokens 8",
        [INLINE_HEADER],
        [
            "typing 2 lines at 30 chars/s",
            "service, alone ",
            "service, beside an ask ",
            "service: ask of 8 tokens ",
        ],
    ),
    "stream_overhead": (
        "--tokens 4 --rounds 1 --max-background 100",
        [SIDES_HEADER],
        [
            "output text: the same on both sides",
            "ratio (service/raw) tokens/s = ",
            "target: ratio >= ",
            "target: overhead <= ",
        ],
    ),
    "replay": (
        "--events 30 --replay-runs 1 --followers 4 --rounds 1 --tokens 4 --retries 0",
        [
            "followers all ok tokens final s tok/s vs 0 decode fan-out ms others",
            "followers RSS before peak VmHWM after growth srv CPU s loop CPU s cli CPU s wall s",
        ],
        ["stored replay: 30 events", "  events/s   median", "live task (", "followers of the 4-"],
    ),
    "model_memory": (
        "--context 256 --rounds 1 --parallel 2",
        ["context 256, parallel 2, 1 rounds, medians; RSS:"],
        ["  no model loaded", "  both models loaded", "  both unloaded", "load time: bundled "],
    ),
    "remote": (
        "--tokens 4 --rounds 1",
        [],
        ["remote: llama_cpp.server", "direct   tokens", "lmsp     tokens", "ratio lmsp/direct"],
    ),
    "serving": (
        "--tokens 4 --streams 1,2 --history 60",
        ["service"],
        [
            "the service's speculation: off",
            "1 streams, tok/s",
            "2 streams, tok/s",
            "follow-up / cold",
            "constrained / free decode",
            "service 1 stream / raw: ",
        ],
    ),
    "load": (
        "--connections 10 --tokens 2 --tasks 1",
        ["kind count 2xx 4xx 5xx other ended p50 ms p99 ms max ms"],
        ["10 connections in ", "p99 first-event latency, ", "server peak RSS: "],
    ),
    "embedding_passes": (
        "--sizes 64,32 --rounds 1 --texts 2 --chunks 2 --chunk-tokens 20 --repeats 1",
        ["pass tokens texts/s chunks/s texts ratio chunks ratio min cosine vs alone"],
        ["bundled model, mean pooling, ", "         64 ", "         32 "],
    ),
    "idle_models": (
        "--tokens 4 --rounds 1",
        ["model A tok/s ratio to alone"],
        ["bundled model twice, ", "alone ", "beside B, kept ", "beside B, released "],
    ),
    "pass_sizes": (
        "--tokens 16 --rounds 1",
        [],
        ["bundled model, 16 tokens", "decode: 1 token beside 7 sequences ", "48 prompt tokens "],
    ),
    "prefill": (
        "--tokens 64 --rounds 1 --decode 2",
        ["way prompt s tok/s ratio decode ms"],
        ["bundled model, a cold prompt of 64 tokens", "fast passes of 512 (llama-server) "],
    ),
    "speculation": (
        "--tokens 6 --rounds 1 --streams 2 --tasks 1",
        ["kind raw off on on/off on/raw drafted"],
        ["code_edit+prediction ", "follow_up ", "free ", "2 streams, tok/s "],
    ),
    "anthropic": (
        "--tokens 4 --rounds 1",
        [],
        [
            "output text: the same on both sides",
            "messages ",
            "responses ",
            "ratio messages/responses tok/s: ",
            "  first  turn ",
            "  second turn ",
            "ratio second/first turn TTFT: ",
        ],
    ),
    "ollama": (
        "--tokens 4 --rounds 1 --texts 2 --chunks 2 --chunk-tokens 20 --queries 1",
        [],
        [
            "output text: the same on every side",
            "ollama ",
            "responses ",
            "chat ",
            "ratio ollama/responses tok/s: ",
            "ratio ollama/chat tok/s: ",
            "service       texts    2",
            "service       corpus chunks/s ",
        ],
    ),
    "hub": (
        "--users 2 --tokens 2 --rounds 1 --replay-events 0",
        [],
        [
            "2 users, one stream each",
            "direct   users    2",
            "hub      users    2",
            "ratio hub/direct ",
        ],
    ),
    "mcp_calls": (
        "--tokens 24 --calls 2",
        ["side p50 ms p95 ms"],
        ["bundled model, get-sum of server-everything", "mcp ", "function ", "first call start-up"],
    ),
    "kernel_ask": (
        "--tokens 4 --rounds 1",
        [SIDES_HEADER],
        [
            "output text: the same on both sides",
            "ratio notebook/raw decode tokens/s = ",
            "deltas per widget events message = ",
        ],
    ),
}


def run(command: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    """Run from the repository's root, with Jupyter's directories of its own."""
    env = {**os.environ}
    for name in ("config", "data", "runtime"):
        (home / name).mkdir(exist_ok=True)
        env[f"JUPYTER_{name.upper()}_DIR"] = str(home / name)
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_benchmark_runs_as_a_file_from_anywhere(name: str, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.startswith(f"usage: {name}.py ")


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_benchmark_runs_with_tiny_sizes_and_prints_its_tables(name: str, tmp_path: Path) -> None:
    arguments, headers, starts = BENCHMARKS[name]
    result = run([sys.executable, "-m", f"benchmarks.{name}", *arguments.split()], tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.splitlines()
    words = [line.split() for line in lines]
    assert [header for header in headers if header.split() not in words] == []
    assert [s for s in starts if not any(line.startswith(s) for line in lines)] == []
    assert [line for line in lines if line.lstrip().startswith("FAIL")] == []


@pytest.mark.parametrize(
    ("name", "arguments", "start"),
    [
        ("pass_sizes", "--tokens 16 --rounds 1 --widths", "    48 "),  # the widest verification
        ("speculation", "--tokens 6 --tasks 1 --passes", "free "),
    ],
)
def test_a_benchmarks_other_mode_runs_with_tiny_sizes(
    name: str, arguments: str, start: str, tmp_path: Path
) -> None:
    result = run([sys.executable, "-m", f"benchmarks.{name}", *arguments.split()], tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert [line for line in result.stdout.splitlines() if line.startswith(start)] != []


@pytest.mark.usefixtures("postgres")  # skips, as every PostgreSQL test does, where none starts
def test_stored_replay_is_measured_on_sqlite_and_postgresql(tmp_path: Path) -> None:
    """``replay.py --postgresql`` (which ``hub.py`` runs too): one fresh server per store,
    every replay checked against the stored events, then the ratio of the two rates."""
    arguments = ["--events", "30", "--replay-runs", "1", "--skip-live", "--postgresql"]
    result = run([sys.executable, "-m", "benchmarks.replay", *arguments], tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.splitlines()
    assert len([line for line in lines if line.startswith("stored replay: 30 events")]) == 3
    assert [line for line in lines if line.startswith("ratio postgresql/sqlite ")] != []
    assert [line for line in lines if "not measured" in line or "FAIL" in line] == []


#: The llama-server side of each benchmark that has one: (tiny arguments, starts of lines).
WITH_LLAMA_SERVER: dict[str, tuple[str, list[str]]] = {
    "inline": (
        "--lines 2 --cps 30 --max-tokens 4 --ask-tokens 8",
        [
            "llama /infill, alone ",
            "llama /infill, beside an ask ",
            "llama /v1/completions, alone ",
            "first ghost character p50, service / llama /infill: ",
        ],
    ),
    "speculation": (
        "--tokens 6 --rounds 1 --streams 2 --tasks 1 --llama-modes ngram-simple",
        ["llama-server, same GGUF, same run; modes: off, ngram-simple", "grounded ", "2 streams, "],
    ),
    "serving": (
        "--tokens 4 --streams 1,2 --history 60",
        ["1 streams, tok/s", "llama-server: ", "llama-server 2: ", "service and raw: "],
    ),
    "ollama": (
        "--tokens 4 --rounds 1 --texts 2 --chunks 2 --chunk-tokens 20 --queries 1",
        ["llama-server  texts    2", "ratio service/llama-server corpus: "],
    ),
}


@pytest.mark.parametrize("name", sorted(WITH_LLAMA_SERVER))
def test_benchmark_runs_beside_llama_server_with_tiny_sizes(name: str, tmp_path: Path) -> None:
    """Skipped unless ``LMSP_LLAMA_SERVER`` names a llama-server binary (serving.py gets it
    twice, as a second build would be given)."""
    from tests.server.remote_engines import LLAMA_SERVER_VARIABLE, skip_reason

    if reason := skip_reason("llama-server"):
        pytest.skip(reason)
    binary = os.environ[LLAMA_SERVER_VARIABLE]
    arguments, starts = WITH_LLAMA_SERVER[name]
    servers = ["--llama-server", binary] * (2 if name == "serving" else 1)
    result = run(
        [sys.executable, "-m", f"benchmarks.{name}", *arguments.split(), *servers], tmp_path
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.splitlines()
    assert [s for s in starts if not any(line.startswith(s) for line in lines)] == []
    assert [line for line in lines if "not measured" in line or line.startswith("FAIL")] == []
