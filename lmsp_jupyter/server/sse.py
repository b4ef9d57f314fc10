"""Server-sent events: one writer for every stream endpoint."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Protocol

from tornado.iostream import StreamClosedError
from tornado.web import RequestHandler

KEEPALIVE = b": keep-alive\n\n"
#: How long a browser's EventSource waits before reconnecting after a drop.
RETRY_MILLISECONDS = 2000


class SseEvent(Protocol):
    """Anything that can be sent as one server-sent event."""

    def to_sse(self) -> bytes:
        """The event's bytes."""
        ...


class EventStream:
    """Writes events to a handler as SSE, with keep-alive comments while idle.

    The events are iterated in the handler's own task, so a disconnect (``close``) cancels that
    task and, through it, whatever produces the events. One timer, not one per event, sends the
    keep-alive comments: the per-token path stays a write and a flush.
    """

    def __init__(self, handler: RequestHandler, keepalive_seconds: float) -> None:
        self._handler = handler
        self._keepalive = keepalive_seconds
        self._task: asyncio.Task[object] | None = None
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._last_write = time.monotonic()

    async def send(self, events: AsyncIterator[SseEvent]) -> None:
        """Send ``events`` until they end, or until the client disconnects."""
        handler = self._handler
        handler.set_header("Content-Type", "text/event-stream; charset=utf-8")
        handler.set_header("Cache-Control", "no-cache")
        handler.set_header("X-Accel-Buffering", "no")
        self._task = asyncio.current_task()
        self._arm()
        try:
            await self._write(f"retry: {RETRY_MILLISECONDS}\n\n".encode())
            async for event in events:
                await self._write(event.to_sse())
        except StreamClosedError:
            pass
        except asyncio.CancelledError:
            if not self._closed:
                raise
            self._task.uncancel()  # type: ignore[union-attr]  # our own cancel: the client left
        finally:
            self._task = None
            if self._timer is not None:
                self._timer.cancel()

    async def _write(self, data: bytes) -> None:
        self._last_write = time.monotonic()
        self._handler.write(data)
        await self._handler.flush()

    def _arm(self) -> None:
        due = self._last_write + self._keepalive
        self._timer = asyncio.get_running_loop().call_at(
            asyncio.get_running_loop().time() + max(due - time.monotonic(), 0), self._tick
        )

    def _tick(self) -> None:
        if self._task is None:
            return
        if time.monotonic() - self._last_write >= self._keepalive:
            self._last_write = time.monotonic()
            self._handler.write(KEEPALIVE)
            self._handler.flush().add_done_callback(_ignore_closed)
        self._arm()

    def close(self) -> None:
        """Stop producing events (the client is gone)."""
        if self._task is not None:
            self._closed = True
            self._task.cancel()


def _ignore_closed(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()  # a flush to a closed stream has nowhere to report
