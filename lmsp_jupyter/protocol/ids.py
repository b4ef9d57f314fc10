"""Object IDs: a type prefix and a ULID (LMSP 1.0 section 6.2)."""

from __future__ import annotations

from typing import Literal

from ulid import ULID

IdPrefix = Literal["resp", "msg", "fc", "call", "rs", "task", "mcpl", "mcp", "mcpr"]


def new_id(prefix: IdPrefix) -> str:
    """A new, time-ordered ID such as ``resp_01J8M6Q4W2T7N5R3V9X1Z8B0DF``."""
    return f"{prefix}_{ULID()}"
