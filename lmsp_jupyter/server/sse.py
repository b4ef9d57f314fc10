"""Server-sent events: one writer for every stream endpoint."""

from __future__ import annotations

import asyncio
import contextlib
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

    When the client goes away, the event source is closed, which cancels what produces it.
    """

    def __init__(self, handler: RequestHandler, keepalive_seconds: float) -> None:
        self._handler = handler
        self._keepalive = keepalive_seconds
        self._queue: asyncio.Queue[SseEvent | None] = asyncio.Queue()
        self._pump: asyncio.Task[None] | None = None

    async def send(self, events: AsyncIterator[SseEvent]) -> None:
        """Send ``events`` until they end, or until the client disconnects."""
        handler = self._handler
        handler.set_header("Content-Type", "text/event-stream; charset=utf-8")
        handler.set_header("Cache-Control", "no-cache")
        handler.set_header("X-Accel-Buffering", "no")
        self._pump = asyncio.ensure_future(self._drain(events))
        try:
            handler.write(f"retry: {RETRY_MILLISECONDS}\n\n".encode())
            await handler.flush()
            while (event := await self._next()) is not None:
                handler.write(event.to_sse())
                await handler.flush()
        except StreamClosedError:
            pass
        finally:
            self.close()

    async def _drain(self, events: AsyncIterator[SseEvent]) -> None:
        try:
            async for event in events:
                self._queue.put_nowait(event)
        finally:
            self._queue.put_nowait(None)

    async def _next(self) -> SseEvent | None:
        while True:
            try:
                return await asyncio.wait_for(self._queue.get(), self._keepalive)
            except TimeoutError:
                self._handler.write(KEEPALIVE)
                await self._handler.flush()

    def close(self) -> None:
        """Stop producing events (the client is gone or the stream ended)."""
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)
