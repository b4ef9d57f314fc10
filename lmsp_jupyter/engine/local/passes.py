"""How the batching worker cuts its work into llama.cpp forward passes, so that a token's logits
do not depend on what else is in the pass."""

from __future__ import annotations

#: The most tokens of one sequence a pass holds. llama.cpp's CPU kernels change their
#: arithmetic with the shape of a pass in three places, measured by ``benchmarks/pass_sizes.py``:
#:
#: - matrix products of K-quantized weights are tiled from 8 tokens of a pass on. The engine
#:   turns that kernel off where it starts (``prepare_llama_cpp``, which says when it cannot):
#:   products then compute each token alone, whatever else the pass holds, as fast as the tiled
#:   kernel for decoding and at 0.8 of its speed for reading prompts;
#: - attention is tiled from 64 tokens of one sequence: passes hold at most ``PASS_MAX`` of each;
#: - a pass of one token of one sequence splits attention over the KV cache in chunks that
#:   depend on how full it is, once it attends over 512 cells or more. llama.cpp views a
#:   sequence's cache in steps of 256 cells, so that is a token at position
#:   ``SPLIT_ATTENTION_FROM`` or later: such a token gets a padding token beside it, which is
#:   dropped.
#:
#: Each sequence has its own KV stream, its cells in position order, which attention visits in
#: turn. Then a token's logits depend neither on the other sequences nor on how its prompt was
#: cut into passes, nor on whether its prefix came from the cache. The batching worker composes
#: the passes (``engine/batching.py``).
PASS_MAX = 48
SPLIT_ATTENTION_FROM = 256


def lone_token_needs_pad(position: int) -> bool:
    """Whether a pass of one token, at ``position`` of its sequence, needs a padding token
    beside it to keep attention whole."""
    return position >= SPLIT_ATTENTION_FROM


def pass_size(left: int, most: int = PASS_MAX) -> int:
    """The next pass's size when ``left`` tokens of one sequence (a prompt, or a sampled token
    and those its schema forced after it) remain: as few passes of at most ``most`` tokens (and
    ``PASS_MAX``) as can hold them, as even as can be."""
    passes = -(-left // max(1, min(most, PASS_MAX)))
    return -(-left // passes)


def decode_pass(ids: list[int], position: int) -> range:
    """The pass that reads the sampled tokens of the sequences ``ids`` (in order, at least one;
    the first one's token at ``position``): the run of consecutive sequence ids from the first
    to the last, as llama.cpp reads one pass across streams only for consecutive sequences. The
    sequences in between (prompts being read, idle slots), and the next one when a lone token
    needs a pad (the one after the last slot is the pad sequence), get padding tokens: a pad
    costs a fraction of a pass of its own."""
    if len(ids) == 1 and lone_token_needs_pad(position):
        return range(ids[0], ids[0] + 2)
    return range(ids[0], ids[-1] + 1)
