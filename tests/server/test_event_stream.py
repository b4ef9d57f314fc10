"""What an SSE stream holds: a stream its idempotency key answers again keeps what it sent; the
others (a task's followers, a stream without a key) hold no frame once it is written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from tornado.web import RequestHandler

from lmsp_jupyter.protocol.events import ResponseEvent, ResponseInProgress
from lmsp_jupyter.protocol.responses import Response
from lmsp_jupyter.server.sse import EventStream, SsePayload, sse_frame

FRAMES = 50


class Client:
    """The parts of a Tornado handler an ``EventStream`` writes to; records what is written."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.settings: dict[str, Any] = {}

    def set_header(self, name: str, value: str) -> None:
        pass

    def write(self, data: bytes) -> None:
        self.written.append(data)

    async def flush(self) -> None:
        pass


def event(number: int) -> ResponseEvent:
    response = Response(id="resp_1", created_at=0, model="m", status="in_progress", output=[])
    return ResponseEvent(number, ResponseInProgress(response_id="resp_1", response=response))


async def events() -> AsyncIterator[SsePayload]:
    for number in range(1, FRAMES + 1):
        yield event(number)


def sent(**options: bool) -> tuple[EventStream, Client]:
    """A stream with ``options`` after it sent ``FRAMES`` events, and its client."""
    client = Client()
    stream = EventStream(cast(RequestHandler, client), 600, **options)
    asyncio.run(stream.send(events()))
    return stream, client


def test_a_stream_holds_no_frame_it_sent_unless_it_is_kept() -> None:
    stream, client = sent()  # as a task's follower streams
    assert len(client.written) == FRAMES
    with pytest.raises(RuntimeError, match="only a kept stream"):
        stream.transcript  # noqa: B018


def test_a_kept_stream_has_every_frame_it_sent_as_its_transcript() -> None:
    stream, client = sent(kept=True)
    assert stream.transcript == b"".join(client.written).decode()
    assert stream.transcript.endswith(sse_frame(event(FRAMES)).decode())
