"""How many tokens an embedding pass should read: the engine's embedder at each pass size.

The bundled model loaded to embed as the service loads it (``LlamaEmbedder``: mean pooling, the
2,048-token window, the service's threads, weights not repacked), then for each of ``--sizes``
in turn (alternated, so that no size always runs on a cold or warm machine): ``--rounds`` calls
of ``--texts`` short texts (texts/s), and a corpus of ``--chunks`` chunks of about
``--chunk-tokens`` tokens, ``--texts`` a call (chunks/s); medians per size, each size's ratio to
the largest, and the lowest cosine between a text's vector in its call and the text alone.

It measures and never asserts: the exit code is 0 whatever the numbers.

Run: ``.venv/bin/python benchmarks/embedding_passes.py [--sizes 2048,256,128] [--rounds 3]
[--texts 32] [--chunks 64] [--chunk-tokens 200] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if not __package__:  # run as a file: python benchmarks/embedding_passes.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from benchmarks.harness.raw import Settings
from benchmarks.ollama import corpus_texts, cosine, embedding_texts
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.engine.embedding import EMBEDDING_WINDOW
from lmsp_jupyter.engine.local.llama.embedder import EMBEDDING_PASS_TOKENS, LlamaEmbedder


def rates(embedder: LlamaEmbedder, args: argparse.Namespace) -> tuple[float, float, float]:
    """Short texts a second (median of the rounds), corpus chunks a second, and the lowest
    cosine of a short text's vector in its call against the text alone."""
    texts = embedding_texts(args.texts)
    chunks = corpus_texts(args.chunks, args.chunk_tokens)
    embedder.embed(texts[:2])  # warm-up
    per_round = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        vectors, _ = embedder.embed(texts)
        per_round.append(len(texts) / (time.perf_counter() - start))
    start = time.perf_counter()
    for first in range(0, len(chunks), args.texts):
        embedder.embed(chunks[first : first + args.texts])
    corpus = len(chunks) / (time.perf_counter() - start)
    alone = [embedder.embed([text])[0][0] for text in texts[:4]]
    closest = min(cosine(a, b) for a, b in zip(alone, vectors, strict=False))
    return statistics.median(per_round), corpus, closest


def benchmark(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
    """Measure each pass size ``--repeats`` times, alternating; print the table and ratios."""
    sizes = [int(size) for size in args.sizes.split(",")]
    model = ModelCatalog().get(BUNDLED_MODEL_ID).path()
    threads = Settings.service_defaults().threads
    print(
        f"bundled model, mean pooling, {threads} threads: {args.rounds} calls of {args.texts} "
        f"short texts; {args.chunks} chunks of ~{args.chunk_tokens} tokens, {args.texts} a call"
    )
    figures: dict[int, list[tuple[float, float, float]]] = {size: [] for size in sizes}
    for _ in range(args.repeats):
        for size in sizes:
            embedder = LlamaEmbedder(model, "mean", EMBEDDING_WINDOW, threads, pass_tokens=size)
            try:
                figures[size].append(rates(embedder, args))
            finally:
                embedder.close()
    largest = max(sizes)
    base = [statistics.median(f[i] for f in figures[largest]) for i in (0, 1)]
    print("pass tokens  texts/s  chunks/s  texts ratio  chunks ratio  min cosine vs alone")
    for size in sizes:
        texts, chunks = (statistics.median(f[i] for f in figures[size]) for i in (0, 1))
        closest = min(f[2] for f in figures[size])
        default = "  (the default)" if size == EMBEDDING_PASS_TOKENS else ""
        print(
            f"{size:>11}  {texts:7.2f}  {chunks:8.2f}  {texts / base[0]:11.3f}"
            f"  {chunks / base[1]:12.3f}  {closest:.6f}{default}"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 whatever it measures, 1 only if it could not measure."""
    parser = benchmark_parser(__doc__, rounds=3)
    parser.add_argument("--sizes", default=f"{EMBEDDING_WINDOW},{EMBEDDING_PASS_TOKENS},128")
    parser.add_argument("--texts", type=int, default=32, help="texts per call")
    parser.add_argument("--chunks", type=int, default=64, help="chunks of the corpus")
    parser.add_argument("--chunk-tokens", type=int, default=200, help="tokens of a chunk, about")
    parser.add_argument("--repeats", type=int, default=2, help="times each size is measured")
    return benchmark_main(parser, benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
