"""Which forward-pass compositions give the same logits, and what a pass of each size costs.

The engine computes each token in one of two regimes (``engine/passes.py``): token passes, on
llama.cpp's reference kernels, of any composition (prompt ends, sampled tokens one per sequence
side by side, drafts); and block passes, on its fast kernels, of at least ``BLOCK`` tokens of a
sequence (prompt starts). This measures that each regime gives a token the same result whatever
else its pass holds, on the bundled model, through the engine's own ``LlamaModel`` (the context
the service uses: a KV stream per sequence, weights not repacked): the logits of every position
of one ``--tokens``-token text are computed with each composition below and compared with the
regime's reference way (largest difference of any logit; 0 means bit-identical), then each pass
size is timed (milliseconds a pass, the median of ``--rounds``). It also prints how far the two
regimes are apart: why a token's regime must not depend on the cache.

With ``--widths`` it times verifications instead: passes of 1 to 48 tokens of one sequence,
keeping the logits of every token (as a draft's verification does) and of the last only. Where
the first cost more than the row count says, the kernels swept the output layer twice
(``output_tile`` in ``engine/local/llama/runtime.py``).

Run: ``.venv/bin/python benchmarks/pass_sizes.py [--tokens 320] [--rounds 20] [--widths]``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

if not __package__:  # run as a file: python benchmarks/pass_sizes.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness.cli import benchmark_main, benchmark_parser
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.engine.local.llama.model import BatchToken, LlamaModel
from lmsp_jupyter.engine.local.llama.runtime import prepare_llama_cpp
from lmsp_jupyter.engine.local.passes import BLOCK, PASS_MAX, pass_size

SEQUENCES = 8
#: A length that block passes of 64, of 128 and of 77, 115 and 128 each end at.
WHOLE = 5 * BLOCK
#: Logits of each position of the text, by position.
Logits = dict[int, npt.NDArray[np.float32]]


class Probe:
    """One text read through one ``LlamaModel`` in chosen passes."""

    def __init__(self, model: LlamaModel, tokens: list[int]) -> None:
        self.model = model
        self.tokens = tokens

    def read(
        self, sizes: Callable[[int], int], pad_to: int = 0, beside: int = 0, block: bool = False
    ) -> Logits:
        """The text in passes (``block`` passes, or token passes) of ``sizes(left)`` tokens of
        sequence 0, each padded to ``pad_to`` with tokens after its end (dropped after the
        pass) and beside ``beside`` other sequences given as many padding tokens."""
        for sequence in range(SEQUENCES):
            self.model.forget(sequence)
        logits: Logits = {}
        start = 0
        while start < len(self.tokens):
            size = sizes(len(self.tokens) - start)
            end = start + size
            batch = [BatchToken(self.tokens[p], p, 0, True) for p in range(start, end)]
            batch += [BatchToken(0, p, 0, False) for p in range(end, start + pad_to)]
            width = len(batch)
            for other in range(1, beside + 1):
                batch += [BatchToken(0, p, other, False) for p in range(width)]
            self.model.decode(batch, block)
            for row in range(size):
                logits[start + row] = self.model.logits(row).copy()
            self.model.forget(0, end)
            for other in range(1, beside + 1):
                self.model.forget(other)
            start = end
        return logits

    def pass_ms(
        self, size: int, sequences: int, rounds: int, block: bool = False, every: bool = False
    ) -> float:
        """Milliseconds of a pass (a ``block`` pass, or a token pass) of ``size`` tokens of
        each of ``sequences`` sequences after the text (the median of ``rounds``), keeping the
        logits of each sequence's last token, or of ``every`` token."""
        base = len(self.tokens)
        for sequence in range(sequences):  # each sequence's cache holds the text
            self.model.forget(sequence)
            for start in range(0, base, PASS_MAX):
                end = min(base, start + PASS_MAX)
                self.model.decode(
                    [BatchToken(self.tokens[p], p, sequence, False) for p in range(start, end)]
                )
        times: list[float] = []
        for _ in range(rounds):
            batch = [
                BatchToken(0, base + p, sequence, every or p == size - 1)
                for sequence in range(sequences)
                for p in range(size)
            ]
            began = time.perf_counter()
            self.model.decode(batch, block)
            times.append(time.perf_counter() - began)
            for sequence in range(sequences):
                self.model.forget(sequence, base)
        return 1000 * statistics.median(times)


def largest_difference(a: Logits, b: Logits) -> float:
    """The largest difference between any logit of ``a`` and ``b``."""
    return max(float(np.abs(a[p] - b[p]).max()) for p in a)


#: The verification widths ``--widths`` times: every one up to 16, then two stretches of 4.
WIDTHS = [*range(1, 17), *range(20, 25), *range(44, PASS_MAX + 1)]


def print_widths(probe: Probe, rounds: int, tile: int) -> None:
    """The cost of a verification of each of ``WIDTHS`` tokens, against keeping one row."""
    print(f"verifications after {len(probe.tokens)} tokens; output tile {tile} rows")
    print(f"{'tokens':>6} {'every row, ms':>14} {'last row, ms':>13} {'rows cost, ms':>14}")
    for width in WIDTHS:
        every = probe.pass_ms(width, 1, rounds, every=True)
        last = probe.pass_ms(width, 1, rounds)
        print(f"{width:>6} {every:>14.1f} {last:>13.1f} {every - last:>14.1f}")


def benchmark(args: argparse.Namespace, scratch: Path, log_path: Path) -> None:
    entry = ModelCatalog(include_bundled=True).get(BUNDLED_MODEL_ID)
    rng = np.random.default_rng(1)
    tokens = [2] + [int(t) for t in rng.integers(1000, 6000, args.tokens - 1)]
    model = LlamaModel(
        entry.path(), cells=args.tokens + 4 * BLOCK + 128, sequences=SEQUENCES, threads=2
    )
    try:
        probe = Probe(model, tokens)
        if args.widths:
            print_widths(probe, args.rounds, model.output_tile)
            return
        reference = probe.read(pass_size)
        compositions: list[tuple[str, Logits]] = [
            ("passes of 8", probe.read(lambda left: min(left, 8))),
            ("passes of 17, 9, 31, ...", probe.read(lambda left: min(left, [17, 9, 31][left % 3]))),
            ("passes of 8 beside 2 other sequences", probe.read(lambda left: min(left, 8), 0, 2)),
            ("passes of 7", probe.read(lambda left: min(left, 7))),
            ("passes of 3", probe.read(lambda left: min(left, 3))),
            ("decode: 1 token + 1 after it", probe.read(lambda left: 1, pad_to=2)),
            ("decode: 1 token beside 1 sequence", probe.read(lambda left: 1, beside=1)),
            ("decode: 1 token beside 7 sequences", probe.read(lambda left: 1, beside=7)),
        ]
        compositions.append(("decode: 1 token alone", probe.read(lambda left: 1)))
        compositions.append(("token passes of 4 * BLOCK", probe.read(lambda left: min(left, 256))))
        # Passes of 64, of 128 and of 77, 115, 128 all end at each multiple of 320 tokens.
        whole = len(tokens) // WHOLE * WHOLE
        blocks = probe.read(lambda left: min(left, 2 * BLOCK), block=True)
        uneven = itertools.cycle([BLOCK + 13, WHOLE - 3 * BLOCK - 13, 2 * BLOCK])
        block_compositions: list[tuple[str, Logits]] = [
            (f"block passes of {BLOCK}", probe.read(lambda left: min(left, BLOCK), block=True)),
            (
                f"block passes of {BLOCK + 13}, {WHOLE - 3 * BLOCK - 13}, {2 * BLOCK}, ...",
                probe.read(lambda left: min(left, next(uneven)), block=True),
            ),
        ]
        print(f"bundled model, {len(tokens)} tokens; reference: token passes of {PASS_MAX}")
        print(f"{'composition':42} {'largest logit difference':>26}")
        inexact = prepare_llama_cpp()
        for name, logits in compositions:
            difference = largest_difference(logits, reference)
            print(f"{name:42} {difference:>26.4f}")
            if difference and inexact is None:
                print(f"FAIL: {name} is a pass the engine makes and should give the same logits")
        print(f"\nblock passes; reference: block passes of {2 * BLOCK} (first {whole} tokens)")
        for name, logits in block_compositions if whole else []:
            difference = largest_difference(
                {p: logits[p] for p in range(whole)}, {p: blocks[p] for p in range(whole)}
            )
            print(f"{name:42} {difference:>26.4f}")
            if difference and inexact is None:
                print(f"FAIL: {name} is a pass the engine makes and should give the same logits")
        if whole:
            apart = largest_difference({p: blocks[p] for p in range(whole)}, reference)
            print(f"{'block passes against token passes':42} {apart:>26.4f}")
        else:
            print(f"(no whole block passes to compare in {len(tokens)} tokens: {WHOLE} or more)")
        if inexact is not None:
            print(f"(the engine does not claim these are equal in this process: {inexact})")
        print(f"\n{'pass':42} {'ms a pass':>10} {'tokens/s':>9}")
        for size, sequences in [(1, 2), (1, 4), (1, 8), (2, 1)]:
            ms = probe.pass_ms(size, sequences, args.rounds)
            name = f"{size} token(s) of each of {sequences} sequence(s)"
            print(f"{name:42} {ms:>10.1f} {size * sequences * 1000 / ms:>9.0f}")
        for size in (8, 32, PASS_MAX):
            ms = probe.pass_ms(size, 1, args.rounds)
            print(f"{f'{size} prompt tokens':42} {ms:>10.1f} {size * 1000 / ms:>9.0f}")
        for size in (BLOCK, 2 * BLOCK, 4 * BLOCK):
            ms = probe.pass_ms(size, 1, args.rounds, block=True)
            print(
                f"{f'{size} prompt tokens, a block pass':42} {ms:>10.1f} {size * 1000 / ms:>9.0f}"
            )
    finally:
        model.close()


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; 0 whatever it measures, 1 only if it could not measure."""
    parser = benchmark_parser(__doc__, tokens=320, rounds=20)
    parser.add_argument("--widths", action="store_true", help="time verifications of each width")
    return benchmark_main(parser, benchmark, argv)


if __name__ == "__main__":
    sys.exit(main())
