"""Server-sent events: one writer for every stream endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from tornado.iostream import StreamClosedError
from tornado.web import RequestHandler

from ..protocol.anthropic_answers import AnthropicStreamEvent
from ..protocol.chat_answers import (
    ChatCompletionChunk,
    ChatStreamDone,
    ChatStreamError,
    ChatStreamFrame,
)
from ..protocol.completions import TextCompletion
from ..protocol.events import ResponseEvent
from ..service.channel import Interrupted
from ..service.store.records import StoredEvent
from .base import LmspHandler

#: A comment line alone: a blank line after it would make some clients see an empty event.
KEEPALIVE = b": keep-alive\n"
#: How long a browser's EventSource waits before reconnecting after a drop.
RETRY_MILLISECONDS = 2000
#: How long a client may take nothing before it is dropped (``LmspApp.slow_client_seconds``).
SLOW_CLIENT_SECONDS = 30.0


#: Anything that can be sent as one server-sent event (the client reads it back as a
#: ``ServerSentEvent``).
SsePayload = (
    ResponseEvent
    | StoredEvent
    | Interrupted
    | ChatStreamFrame
    | TextCompletion
    | AnthropicStreamEvent
)


def sse_frame(event: SsePayload) -> bytes:
    """``event`` as SSE bytes: ``id``, ``event`` and one line of JSON ``data`` for LMSP events;
    ``data`` alone for (Chat) Completions' frames, as OpenAI's clients read them; ``event``
    (its ``type``) and ``data`` for Anthropic's Messages events."""
    if isinstance(event, ResponseEvent):
        return _frame(event.id, event.event, event.data_json())
    if isinstance(event, StoredEvent):
        return _frame(event.id, event.event, event.data)
    if isinstance(event, Interrupted):
        return _frame(event.last_id, "error", event.data.model_dump_json())
    if isinstance(event, TextCompletion):  # as OpenAI's: ``finish_reason: null`` until the end
        return _frame(
            None, None, event.model_dump_json(exclude={"usage"} if not event.usage else None)
        )
    if isinstance(event, ChatCompletionChunk):
        return _frame(None, None, event.model_dump_json(exclude_none=True))
    if isinstance(event, AnthropicStreamEvent):
        return _frame(None, event.type, event.model_dump_json())
    if isinstance(event, ChatStreamError):
        return _frame(None, None, event.model_dump_json())
    assert isinstance(event, ChatStreamDone)
    return _frame(None, None, "[DONE]")


def _frame(event_id: int | None, event: str | None, data: str) -> bytes:
    """One SSE frame: ``id`` and ``event`` where given, then one line of ``data``."""
    head = "" if event_id is None else f"id: {event_id}\n"
    if event is not None:
        head += f"event: {event}\n"
    return f"{head}data: {data}\n\n".encode()


class EventStream:
    """Writes events to a handler as SSE, with keep-alive comments while idle.

    The events are iterated in the handler's own task, so a disconnect (``close``) cancels that
    task and, through it, whatever produces the events. One timer, not one per event, sends the
    keep-alive comments: the per-token path stays a write and a flush. Only a stream that is
    ``kept`` (its idempotency key answers it again) holds what it sent; the others, task
    followers among them, hold no frame once written. A subclass may send the events in
    another framing (``media_type``, ``opening``, ``keepalive``, ``frame``).
    """

    #: The ``Content-Type`` of the stream.
    media_type = "text/event-stream; charset=utf-8"
    #: What goes before the first frame: ``retry``, in the first event's frame (11.4).
    opening = f"retry: {RETRY_MILLISECONDS}\n".encode()
    #: What is sent while idle.
    keepalive = KEEPALIVE

    def __init__(
        self, handler: RequestHandler, keepalive_seconds: float, *, kept: bool = False
    ) -> None:
        self._handler = handler
        self._keepalive = keepalive_seconds
        self._task: asyncio.Task[object] | None = None
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._last_write = time.monotonic()
        self._sent: list[bytes] | None = [] if kept else None

    @property
    def transcript(self) -> str:
        """Everything sent so far but keep-alive comments, what ``replay`` sends again; only
        a ``kept`` stream has one."""
        if self._sent is None:
            raise RuntimeError("only a kept stream has a transcript")
        return b"".join(self._sent).decode()

    def _start(self) -> None:
        handler = self._handler
        handler.set_header("Content-Type", self.media_type)
        handler.set_header("Cache-Control", "no-cache")
        handler.set_header("X-Accel-Buffering", "no")

    async def replay(self, transcript: str) -> None:
        """Send a finished stream's ``transcript`` again, as a stream (an idempotent replay)."""
        self._start()
        with contextlib.suppress(StreamClosedError):  # the client left: nothing to undo
            await self._write(transcript.encode())

    async def send(self, events: AsyncIterator[SsePayload]) -> None:
        """Send ``events`` until they end, or until the client disconnects."""
        self._start()
        self._task = asyncio.current_task()
        self._arm()
        try:
            await self._handler.flush()  # the headers now: a stream, even before its first event
            head = self.opening
            async for event in events:
                await self._write(head + self.frame(event))
                head = b""
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
            close = getattr(events, "aclose", None)
            if close is not None:  # stop what produces the events now, not when collected
                await close()

    async def _write(self, data: bytes) -> None:
        """Write and wait until the socket took it: at most one event waits per client. A
        client that takes nothing for ``lmsp_slow_client_seconds`` is dropped (it resumes
        from its last event id), so it neither holds memory nor the model."""
        self._last_write = time.monotonic()
        if self._sent is not None:
            self._sent.append(data)
        self._handler.write(data)
        limit: float = self._handler.settings.get("lmsp_slow_client_seconds", SLOW_CLIENT_SECONDS)
        try:
            await asyncio.wait_for(self._handler.flush(), limit)
        except TimeoutError:
            self._handler.request.connection.close()  # type: ignore[union-attr]
            raise StreamClosedError() from None

    def frame(self, event: SsePayload) -> bytes:
        """``event`` as it is sent."""
        return sse_frame(event)

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
            self._handler.write(self.keepalive)
            self._handler.flush().add_done_callback(_ignore_closed)
        self._arm()

    def close(self) -> None:
        """Stop producing events (the client is gone)."""
        if self._task is not None:
            self._closed = True
            self._task.cancel()


class StreamingHandler(LmspHandler):
    """A handler that sends events as SSE; a client that leaves stops what produces them."""

    _stream: EventStream | None = None

    def event_stream(self, *, kept: bool = False) -> EventStream:
        """A stream to this client: the one a disconnect closes; ``kept``: it holds what it
        sends, for its idempotency key to answer again."""
        self._stream = EventStream(self, self.settings["lmsp_keepalive_seconds"], kept=kept)
        return self._stream

    async def send_events(self, events: AsyncIterator[SsePayload]) -> None:
        """Send ``events`` until they end or the client leaves, then finish the reply."""
        await self.event_stream().send(events)
        self.finish()

    def on_connection_close(self) -> None:
        if self._stream is not None:
            self._stream.close()


def _ignore_closed(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()  # a flush to a closed stream has nowhere to report
