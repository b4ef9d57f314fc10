"""Ollama's API against LMSP on the same service: chat streams and embeddings throughput.

One ``jupyter lmsp`` server, the bundled model (also serving embeddings with mean pooling,
``LmspApp.embedding_models``), greedy decoding:

* chat: the same user message, model and ``--tokens`` streamed through Ollama's
  ``POST /lmsp/ollama/api/chat`` (NDJSON), LMSP's ``POST /lmsp/v1/responses`` and Chat
  Completions ``POST /lmsp/v1/chat/completions`` (SSE); after one warm-up of each, ``--rounds``
  rounds of ollama, responses, chat, never two at once. Prints per side the median tokens/s
  (end-to-end and decode-only) and time to first token, whether the text is the same on every
  side, and the ratios ollama/responses and ollama/chat (goal >= 0.97);
* embeddings, three workloads a notebook has: ``--texts`` short texts a request (``--rounds``
  requests after a warm-up; texts/s and input tokens/s); indexing a corpus of ``--chunks``
  chunks of about ``--chunk-tokens`` tokens, ``--texts`` a request one after another (chunks/s);
  ``--queries`` one-sentence queries one at a time (latency). With ``--llama-server PATH``, the
  same requests to ``llama-server --embeddings --pooling mean`` on the same GGUF
  (``/v1/embeddings``, 8 slots as in serving.py), the ratios service/llama-server (goal >= 1)
  and how close the two sides' vectors are.

It measures and never asserts: the exit code is 0 whatever the numbers.

Run: ``.venv/bin/python benchmarks/ollama.py [--tokens 128] [--rounds 5] [--texts 32]
[--chunks 256] [--chunk-tokens 200] [--queries 20] [--llama-server PATH]``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

if not __package__:  # run as a file: python benchmarks/ollama.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.figures import median
from benchmarks.harness.llama_server import llama_server
from benchmarks.harness.raw import DEFAULT_PROMPT, Settings
from benchmarks.harness.server import Server, running_server
from benchmarks.remote import alternate, direct_stream, lmsp_stream, print_side
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog

TARGET_CHAT_RATIO = 0.97
TARGET_EMBEDDING_RATIO = 1.0
#: Sentences the embedding requests cycle through (each text a few of them).
SENTENCES = [
    "The keeper climbed the stairs each evening and trimmed the wick.",
    "A violin rested in its case beside the window of the music room.",
    "Owls called across the frozen river long after the village slept.",
    "The library kept its oldest maps in a drawer that smelled of cedar.",
    "Tea cooled on the table while the rain wrote lines on the glass.",
]


def ollama_stream(client: httpx.Client, server: Server, body: dict[str, object]) -> Iterator[str]:
    """The content pieces of a streamed Ollama chat (one JSON object a line)."""
    url = f"{server.base_url}/lmsp/ollama/api/chat"
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line:
                continue
            chunk = json.loads(line)
            if "error" in chunk:
                raise RuntimeError(f"the Ollama stream failed: {chunk['error']}")
            content = (chunk.get("message") or {}).get("content")
            if content:
                yield content


def chat_sides(
    client: httpx.Client, server: Server, prompt: str, tokens: int
) -> dict[str, Callable[[], Iterator[str]]]:
    """The three ways of streaming the same chat, by name."""
    messages = [{"role": "user", "content": prompt}]
    ollama_body: dict[str, object] = {
        "model": BUNDLED_MODEL_ID,
        "messages": messages,
        "options": {"temperature": 0, "num_predict": tokens},
    }
    responses_body = {
        "model": BUNDLED_MODEL_ID,
        "input": prompt,
        "temperature": 0,
        "max_output_tokens": tokens,
        "stream": True,
    }
    chat_body = {
        "model": BUNDLED_MODEL_ID,
        "messages": messages,
        "temperature": 0,
        "max_tokens": tokens,
        "stream": True,
    }
    return {
        "ollama": lambda: ollama_stream(client, server, ollama_body),
        "responses": lambda: lmsp_stream(client, server, responses_body),
        "chat": lambda: direct_stream(client, server.lmsp_url, chat_body),
    }


def measure_chat(client: httpx.Client, server: Server, args: argparse.Namespace) -> None:
    """Alternate the chat sides and print their rates and the ratios."""
    sides = chat_sides(client, server, args.prompt, args.tokens)
    samples = alternate(sides, args.rounds, server.pid)
    print(f"chat: {args.rounds} rounds of {args.tokens} tokens, prompt {args.prompt!r}")
    for name, side in samples.items():
        print_side(name, side)
    texts = {sample.text for side in samples.values() for sample in side}
    print(f"output text: {'the same' if len(texts) == 1 else 'DIFFERENT'} on every side")
    background = median([s for side in samples.values() for s in side], lambda s: s.background)
    print(f"median background load: {background:.1%} of the machine")
    ollama = median(samples["ollama"], lambda s: s.tokens_per_s)
    for other in ("responses", "chat"):
        ratio = ollama / median(samples[other], lambda s: s.tokens_per_s)
        verdict = "PASS" if ratio >= TARGET_CHAT_RATIO else "MISS"
        print(f"ratio ollama/{other} tok/s: {ratio:.3f}   (goal >= {TARGET_CHAT_RATIO}: {verdict})")


@dataclass(frozen=True)
class Batch:
    """One timed embeddings request: its texts, input tokens, seconds and first vector."""

    texts: int
    tokens: int
    seconds: float
    first: list[float]


def embed(client: httpx.Client, url: str, body: dict[str, object]) -> Batch:
    """``POST {url}/embeddings``, timed."""
    start = time.perf_counter()
    response = client.post(f"{url}/embeddings", json=body)
    seconds = time.perf_counter() - start
    response.raise_for_status()
    answer = response.json()
    data = sorted(answer["data"], key=lambda item: item["index"])
    tokens = (answer.get("usage") or {}).get("prompt_tokens", 0)
    return Batch(len(data), tokens, seconds, data[0]["embedding"])


def embedding_texts(count: int) -> list[str]:
    """``count`` distinct texts of two to four sentences."""
    return [
        f"{number}. "
        + " ".join(SENTENCES[(number + k) % len(SENTENCES)] for k in range(2 + number % 3))
        for number in range(count)
    ]


def embed_rounds(
    client: httpx.Client, url: str, body: dict[str, object], rounds: int
) -> list[Batch]:
    """A warm-up request, then ``rounds`` timed ones."""
    embed(client, url, body)
    return [embed(client, url, body) for _ in range(rounds)]


def print_embeddings(name: str, batches: list[Batch]) -> float:
    """One side's texts/s and tokens/s (medians); returns texts/s."""
    texts_per_s = median(batches, lambda b: b.texts / b.seconds)
    tokens_per_s = median(batches, lambda b: b.tokens / b.seconds)
    milliseconds = median(batches, lambda b: b.seconds) * 1000
    print(
        f"{name:<13} texts {batches[0].texts:>4}  texts/s {texts_per_s:8.1f}"
        f"  tokens/s {tokens_per_s:9.1f}  ms/request {milliseconds:8.1f}"
    )
    return texts_per_s


def cosine(a: list[float], b: list[float]) -> float:
    """The cosine similarity of two vectors."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


#: How llama-server serves embeddings of the bundled model: mean pooling, as the service does.
EMBEDDING_ARGUMENTS = ("--embeddings", "--pooling", "mean")


def corpus_texts(count: int, tokens: int) -> list[str]:
    """``count`` distinct chunks of about ``tokens`` tokens each (a document split for search)."""
    per_chunk = max(1, tokens // 14)  # a sentence is about 14 tokens
    return [
        f"Chunk {number}. "
        + " ".join(SENTENCES[(number * 3 + k) % len(SENTENCES)] for k in range(per_chunk))
        for number in range(count)
    ]


def embed_corpus(
    client: httpx.Client, url: str, base: dict[str, object], chunks: list[str], batch: int
) -> float:
    """Embed ``chunks`` ``batch`` a request, one request after another (as LangChain's
    ``embed_documents`` and notebook indexing loops do); the chunks a second."""
    start = time.perf_counter()
    for first in range(0, len(chunks), batch):
        embed(client, url, {**base, "input": chunks[first : first + batch]})
    return len(chunks) / (time.perf_counter() - start)


def query_latencies(
    client: httpx.Client, url: str, base: dict[str, object], count: int
) -> list[float]:
    """Milliseconds of ``count`` one-sentence queries, one at a time (a search box)."""
    return [
        embed(
            client, url, {**base, "input": f"Where is {SENTENCES[n % len(SENTENCES)][4:]}"}
        ).seconds
        * 1000
        for n in range(count)
    ]


def embedding_workload(
    client: httpx.Client, url: str, base: dict[str, object], args: argparse.Namespace, name: str
) -> tuple[float, float, list[float]]:
    """One side's three figures: short texts a second (``--texts`` a request, ``--rounds``
    requests), corpus chunks a second, query latencies in ms; the first two printed."""
    short = embed_rounds(client, url, {**base, "input": embedding_texts(args.texts)}, args.rounds)
    texts_rate = print_embeddings(name, short)
    corpus_rate = embed_corpus(
        client, url, base, corpus_texts(args.chunks, args.chunk_tokens), args.texts
    )
    queries = query_latencies(client, url, base, args.queries)
    print(
        f"{name:<13} corpus chunks/s {corpus_rate:8.1f}  query ms p50 "
        f"{statistics.median(queries):7.1f}  max {max(queries):7.1f}"
    )
    return texts_rate, corpus_rate, short[0].first


def measure_embeddings(
    client: httpx.Client, server: Server, args: argparse.Namespace, scratch: Path
) -> None:
    """Embeddings throughput of the service, and of llama-server when given: short texts, a
    corpus of ``--chunks`` chunks of ``--chunk-tokens`` tokens, ``--queries`` single queries."""
    print(
        f"\nembeddings, mean pooling: {args.rounds} requests of {args.texts} short texts; "
        f"{args.chunks} chunks of ~{args.chunk_tokens} tokens, {args.texts} a request; "
        f"{args.queries} single queries"
    )
    base: dict[str, object] = {"model": BUNDLED_MODEL_ID}
    service = embedding_workload(client, server.lmsp_url, base, args, "service")
    if args.llama_server is None:
        print("llama-server: not run (--llama-server PATH)")
        return
    settings = Settings.service_defaults()
    model = ModelCatalog().get(BUNDLED_MODEL_ID).path()
    log = scratch / "llama-server.log"
    with (
        llama_server(args.llama_server, model, settings, log, extra=EMBEDDING_ARGUMENTS) as url,
        httpx.Client(timeout=600) as plain,
    ):
        other = embedding_workload(plain, f"{url}/v1", {}, args, "llama-server")
    for label, mine, theirs in (
        ("texts/s", service[0], other[0]),
        ("corpus", service[1], other[1]),
    ):
        ratio = mine / theirs
        verdict = "PASS" if ratio >= TARGET_EMBEDDING_RATIO else "MISS"
        print(f"ratio service/llama-server {label}: {ratio:.3f}   (goal >= 1: {verdict})")
    print(f"first vector, cosine service/llama-server: {cosine(service[2], other[2]):.4f}")


def benchmark(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
    """Start the service with the bundled model embedding too; measure chat, then embeddings."""
    config = scratch / "lmsp_config.json"
    config.write_text(json.dumps({"LmspApp": {"embedding_models": {BUNDLED_MODEL_ID: "mean"}}}))
    with (
        running_server(log_path, extra=[f"--config={config}"]) as server,
        httpx.Client(timeout=600, headers=server.headers) as client,
    ):
        measure_chat(client, server, args)
        measure_embeddings(client, server, args, scratch)


def command_line() -> argparse.ArgumentParser:
    """The command line."""
    parser = benchmark_parser(__doc__, tokens=128, rounds=5, prompt=DEFAULT_PROMPT, server_log=True)
    parser.add_argument("--texts", type=int, default=32, help="texts per embeddings request")
    parser.add_argument("--chunks", type=int, default=256, help="chunks of the corpus embedded")
    parser.add_argument("--chunk-tokens", type=int, default=200, help="tokens of a chunk, about")
    parser.add_argument("--queries", type=int, default=20, help="single queries embedded")
    parser.add_argument(
        "--llama-server", type=Path, help="a llama-server binary to compare embeddings with"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    return benchmark_main(command_line(), benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
