"""Memory: what a model takes once loaded, what the machine has, what this process holds."""

from __future__ import annotations

import os
from collections.abc import Mapping

from .gguf import Scalar

#: Bytes per KV cache element: llama.cpp keeps keys and values as 16-bit floats by default.
_KV_ELEMENT_BYTES = 2


def kv_bytes_per_token(architecture: str, values: Mapping[str, Scalar]) -> int:
    """KV cache bytes one token takes in one sequence, from a GGUF header's hyperparameters.

    Keys and values of every layer (sliding-window layers included: llama-cpp-python keeps
    their cache full size). Values a header does not state give 0, never a guess.
    """

    def number(key: str) -> int | None:
        value = values.get(f"{architecture}.{key}")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    layers = number("block_count")
    heads = number("attention.head_count")
    embedding = number("embedding_length")
    if not layers or not heads or not embedding:
        return 0
    kv_heads = number("attention.head_count_kv") or heads
    key_length = number("attention.key_length") or embedding // heads
    value_length = number("attention.value_length") or embedding // heads
    return layers * kv_heads * (key_length + value_length) * _KV_ELEMENT_BYTES


def footprint(weights_bytes: int, kv_per_token: int, context: int, slots: int) -> int:
    """Bytes a loaded model takes: its weights, and the KV cache of ``slots`` sequences of
    ``context`` tokens each (llama.cpp's compute buffers, a few hundred MB, come on top)."""
    return weights_bytes + kv_per_token * context * slots


def physical_memory() -> int:
    """The machine's RAM in bytes (0 where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def resident_bytes(pid: int | str = "self") -> int:
    """The resident set size (RSS) of a process, in bytes (Linux ``/proc``)."""
    with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
