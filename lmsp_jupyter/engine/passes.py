"""How the batching worker cuts its work into llama.cpp forward passes, so that a token's logits
do not depend on what else is in the pass."""

from __future__ import annotations

#: The sizes of forward passes. llama.cpp's CPU kernels change their arithmetic with the number
#: of tokens in a pass: matrix products are tiled from 8 tokens on, attention is tiled from 64
#: tokens of a sequence, and a pass of one token of one sequence splits attention over the KV
#: cache in chunks that depend on how full it is. Within each of two ranges the results are
#: the same whatever else the pass holds: 2 to ``DECODE_PASS_TOKENS`` tokens, and
#: ``PROMPT_PASS_MIN`` to ``PROMPT_PASS_MAX`` tokens of each sequence in it. So sampled tokens
#: are read in passes of the first range (a sequence's next token beside the others', a pad
#: beside a lone one) and prompts in passes of the second (padded to its minimum with tokens
#: after the prompt's end, which are dropped after the pass). Each sequence has its own KV
#: stream, its cells in position order, which attention visits in turn. Then a token's logits
#: depend neither on the other sequences nor on how its prompt was chunked or cached, as long as
#: a cache is reused only as far as it was read as prompt. The batching worker composes the
#: passes (``engine/batching.py``).
DECODE_PASS_TOKENS = 7
PROMPT_PASS_MIN = 8
PROMPT_PASS_MAX = 32


def prompt_pass_size(left: int) -> int:
    """The next prompt pass's size when ``left`` prompt tokens remain: the passes as even as
    can be, so none holds fewer than ``PROMPT_PASS_MIN`` unless the whole prompt does."""
    passes = -(-left // PROMPT_PASS_MAX)
    return -(-left // passes)


def decode_chunk_sizes(count: int) -> list[int]:
    """``count`` (2 or more) tokens of one sequence, a sampled token and those its schema
    forced, in as few passes of 2 to ``DECODE_PASS_TOKENS`` as can hold them, as even as can be."""
    passes = -(-count // DECODE_PASS_TOKENS)
    size, extra = divmod(count, passes)
    return [size + 1] * extra + [size] * (passes - extra)


def decode_passes(ids: list[int]) -> list[range]:
    """The passes that read the sampled tokens of the sequences ``ids`` (in order): runs of
    consecutive sequence ids, as llama.cpp reads a pass across streams only for consecutive
    sequences, of 2 to ``DECODE_PASS_TOKENS``, as few and as even as can be (a pass's time grows
    faster than its number of sequences); the sequences between or after those in ``ids`` get
    padding tokens (the one after the last slot is the pad sequence)."""
    longest = -(-len(ids) // -(-len(ids) // DECODE_PASS_TOKENS)) if ids else 0
    passes: list[range] = []
    first = 0
    while first < len(ids):
        last = first
        while last + 1 < len(ids) and ids[last + 1] < ids[first] + longest:
            last += 1
        passes.append(range(ids[first], max(ids[last] + 1, ids[first] + 2)))
        first = last + 1
    return passes
