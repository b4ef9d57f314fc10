"""How the batching worker cuts its work into llama.cpp forward passes, so that a token's logits
do not depend on what else is in the pass, on how its prompt was cut, or on the cache.

llama.cpp's CPU kernels change their arithmetic with the shape of a pass (measured by
``benchmarks/pass_sizes.py``): matrix products of K-quantized weights are tiled from 8 tokens
of a pass on, attention is tiled from 64 tokens of a sequence, and a lone token splits
attention over the cache once it attends over 512 cells or more. So the engine computes every
token in one of two regimes, each of which gives a token the same result whatever else its
pass holds:

- **token passes** run llama.cpp's reference kernels (its CPU backend's ``use_ref``): no tiled
  product, no tiled or split attention. Sampled tokens, drafts, forced tokens and the end of a
  prompt are read this way, in passes of any composition;
- **block passes** run its fast kernels on at least ``BLOCK`` tokens of one sequence: tiled
  products and tiled attention for every token of the pass. The start of a prompt is read this
  way, up to ``block_end``, as llama-server reads a prompt.

A token's regime is a function of its prompt alone (``block_end``), never of the cache: the
worker reuses a cached prefix only as far as its tokens were computed in the regime the prompt
gives them (``reusable``). Each sequence has its own KV stream, its cells in position order,
which attention visits in turn.
"""

from __future__ import annotations

#: The fewest tokens of a block pass: from 64 queries llama.cpp's attention is tiled
#: (``GGML_FA_TILE_Q``), and a block pass is read with tiled attention for all of them.
BLOCK = 64
#: The most tokens of one sequence a token pass holds: a bound on a step, not on exactness.
PASS_MAX = 48
#: The fewest tokens before the stable part's end that are read in token passes: the next
#: prompt (the next keystroke's, a text continued) may change its last tokens.
UNSTABLE_TAIL = 16


def block_end(length: int, stable_until: int | None = None) -> int:
    """Where a prompt of ``length`` tokens stops being read in block passes: its whole
    ``BLOCK``s up to ``UNSTABLE_TAIL`` tokens before its end, or before ``stable_until``
    (``Prompt.stable_until``: a conversation's first answer, a fill-in-the-middle gap). The next
    prompt of a conversation, or of a cell being typed in, then finds the same blocks in the
    cache, and every token after them in the regime it was read or decoded in."""
    end = length if stable_until is None else min(length, stable_until)
    return max(0, end - UNSTABLE_TAIL) // BLOCK * BLOCK


def reusable(shared: int, cached_blocks: int, blocks: int) -> int:
    """How many tokens of a cache a prompt can take: ``shared`` tokens agree (fewer than the
    prompt's), the cache's first ``cached_blocks`` were read in block passes, and the prompt
    reads its first ``blocks`` in block passes (``block_end``). A reused token must have been
    computed in the prompt's regime, and what is left of the prompt's blocks must fill a block
    pass."""
    kept = shared if cached_blocks == blocks else min(shared, cached_blocks, blocks)
    if 0 < blocks - kept < BLOCK:
        kept = blocks - BLOCK
    return kept


def block_pass_size(left: int, most: int) -> int:
    """The next block pass's size when ``left`` (at least ``BLOCK``) block tokens of a prompt
    remain: as few passes of at most ``most`` tokens (and at least ``2 * BLOCK``) as can hold
    them, as even as can be, so that each holds ``BLOCK`` or more."""
    passes = -(-left // max(most, 2 * BLOCK))
    return -(-left // passes)


def pass_size(left: int, most: int = PASS_MAX) -> int:
    """The next token pass's size when ``left`` tokens of one sequence (a prompt's end, or a
    sampled token and those its schema forced after it) remain: as few passes of at most
    ``most`` tokens (and ``PASS_MAX``) as can hold them, as even as can be."""
    passes = -(-left // max(1, min(most, PASS_MAX)))
    return -(-left // passes)


def decode_pass(ids: list[int]) -> range:
    """The pass that reads the sampled tokens of the sequences ``ids`` (in order, at least
    one): the run of consecutive sequence ids from the first to the last, as llama.cpp reads one
    pass across streams only for consecutive sequences. The sequences in between (prompts being
    read, idle slots) get padding tokens: a pad costs a fraction of a pass of its own."""
    return range(ids[0], ids[-1] + 1)
