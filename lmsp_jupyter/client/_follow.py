"""Following an LMSP event stream: each event once, in order, resumed after a drop (6.3, 6.4)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import httpx
from pydantic import BaseModel, ValidationError

from ..protocol.events import EVENT_NAMES, EventData, ResponseEvent
from ._errors import ProtocolViolation, ServiceUnreachable
from ._sse import ServerSentEvent, SseParser
from ._wire import (
    ACCEPT_EVENTS,
    Call,
    RequestLike,
    media_type,
    no_body,
    problem_error,
    response_body,
    segment,
)

#: Data model of each LMSP event name (the inverse of the protocol's own table).
_EVENT_DATA: dict[str, type[BaseModel]] = {name: model for model, name in EVENT_NAMES.items()}
#: How long to wait before reconnecting when the stream never said (``retry:``).
DEFAULT_RETRY_SECONDS = 1.0
#: Reconnections in a row without a new event before a follower gives up.
RECONNECT_ATTEMPTS = 5


class EventFollower:
    """Reads LMSP events from one or more connections: each event once, in order of id.

    A resumable follower (a task's events) reconnects after a drop with ``Last-Event-ID`` set to
    the last id it gave out, after the ``retry:`` delay the stream asked for, and gives up with
    :class:`ServiceUnreachable` after ``attempts`` reconnections in a row that brought nothing
    new. A follower that cannot resume (a response's own stream) gives up at the first drop.
    """

    def __init__(
        self,
        first: Call[None],
        resume: Callable[[int], Call[None]] | None = None,
        *,
        after: int = 0,
        attempts: int = RECONNECT_ATTEMPTS,
    ) -> None:
        self._first: Call[None] | None = first
        self._resume = resume
        self._attempts = attempts
        self._failures = 0
        self._parser = SseParser()
        self._retry_seconds = DEFAULT_RETRY_SECONDS
        #: The id of the last event given out (or the cursor it started after).
        self.last_id = after
        #: Whether the final event was given out.
        self.finished = False

    def next_request(self) -> Call[None]:
        """The request of the next connection."""
        first, self._first = self._first, None
        if first is not None:
            return first
        assert self._resume is not None, "a follower that cannot resume never reconnects"
        return self._resume(self.last_id)

    def opened(self, reply: httpx.Response) -> None:
        """Check the head of a new connection (an error reply must have been read in full)."""
        if reply.is_error:
            raise problem_error(reply)
        if media_type(reply) != "text/event-stream":
            raise ProtocolViolation(f"expected an event stream, got {media_type(reply)!r}")
        self._parser = SseParser()

    def feed(self, chunk: bytes) -> list[ResponseEvent]:
        """The new LMSP events that ``chunk`` completes."""
        events: list[ResponseEvent] = []
        for message in self._parser.feed(chunk):
            event = _response_event(message)
            if event is None or event.id <= self.last_id or self.finished:
                continue
            self.last_id = event.id
            self.finished = event.is_final
            self._failures = 0
            events.append(event)
        if self._parser.retry is not None:
            self._retry_seconds = self._parser.retry / 1000
        return events

    def dropped(self, url: httpx.URL | str, error: httpx.TransportError | None) -> float:
        """A connection ended before the final event: the seconds to wait before the next one.

        Raises :class:`ServiceUnreachable` when the follower cannot or may no longer reconnect.
        """
        reason = f"{type(error).__name__}: {error}" if error else "the stream ended early"
        if self._resume is None:
            raise ServiceUnreachable(f"{url}: {reason}, before the final event")
        self._failures += 1
        if self._failures > self._attempts:
            raise ServiceUnreachable(
                f"{url}: {reason}; gave up after {self._attempts} reconnections in a row"
            )
        return self._retry_seconds


def follow_response(request: RequestLike, mcp: Sequence[str] = ()) -> EventFollower:
    """A follower of a response's own stream (``POST /responses``): it cannot resume."""
    body = response_body(request, stream=True, mcp=mcp)
    return EventFollower(Call("POST", "responses", no_body, body=body, headers=ACCEPT_EVENTS))


def follow_task(
    task_id: str, after: int | None = None, *, attempts: int = RECONNECT_ATTEMPTS
) -> EventFollower:
    """A follower of ``GET /tasks/{id}/events`` after the cursor ``after``; it resumes."""
    path = f"tasks/{segment(task_id)}/events"

    def resume(last_id: int) -> Call[None]:
        headers = {**ACCEPT_EVENTS, "Last-Event-ID": str(last_id)} if last_id else ACCEPT_EVENTS
        return Call("GET", path, no_body, headers=headers)

    params = {"after": str(after)} if after is not None else {}
    first = Call("GET", path, no_body, headers=ACCEPT_EVENTS, params=params)
    return EventFollower(first, resume, after=after or 0, attempts=attempts)


def _response_event(message: ServerSentEvent) -> ResponseEvent | None:
    """The LMSP event of a server-sent event; ``None`` for an event name LMSP 1.0 lacks."""
    model = _EVENT_DATA.get(message.event)
    if model is None:
        return None
    if not (message.id.isascii() and message.id.isdigit()):
        raise ProtocolViolation(f"event {message.event!r} has no integer id: {message.id!r}")
    try:
        data = model.model_validate_json(message.data)
    except ValidationError as error:
        raise ProtocolViolation(f"invalid {message.event!r} event: {error}") from None
    return ResponseEvent(int(message.id), cast("EventData", data))
