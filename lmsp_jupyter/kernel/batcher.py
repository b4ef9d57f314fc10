"""A throttle of the widget's live messages: at most one message per interval, never one per
token (not the engine's batching)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

#: Seconds between two messages of live events (the contract's 50 ms).
FLUSH_INTERVAL = 0.05


class Batcher(Generic[T]):
    """Collects items and hands them to ``send`` in batches, at most once per ``interval``.

    An item added less than ``interval`` after the last batch waits for a timer, so a burst
    becomes one message and the last items of a burst still go out without a later item.
    """

    def __init__(self, send: Callable[[list[T]], None], interval: float = FLUSH_INTERVAL) -> None:
        self._send = send
        self._interval = interval
        self._lock = threading.Lock()
        self._items: list[T] = []
        self._last = float("-inf")
        self._timer: threading.Timer | None = None

    def add(self, item: T) -> None:
        """Queue ``item``; send now if the last batch is old enough, else arm the timer."""
        with self._lock:
            self._items.append(item)
            wait = self._last + self._interval - time.monotonic()
            if wait > 0:
                if self._timer is None:
                    self._timer = threading.Timer(wait, self.flush)
                    self._timer.daemon = True
                    self._timer.start()
                return
        self.flush()

    def flush(self) -> None:
        """Send what is queued now."""
        with self._lock:
            items, self._items = self._items, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if not items:
                return
            self._last = time.monotonic()
            # sending under the lock keeps the batches in order across the timer's thread
            self._send(items)
