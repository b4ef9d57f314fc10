"""Server-sent events of a response (LMSP 1.0 sections 6.3 and 6.4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from .errors import Problem
from .items import OutputItem
from .responses import IncompleteDetails, ResponseStatus, Usage


class ResponseCreated(BaseModel):
    """``response.created``: the response exists."""

    response_id: str
    status: Literal["in_progress"] = "in_progress"


class OutputItemAdded(BaseModel):
    """``response.output_item.added``: an output item starts."""

    response_id: str
    output_index: int
    item: OutputItem


class OutputTextDelta(BaseModel):
    """``response.output_text.delta``: text appended to a message item."""

    response_id: str
    item_id: str
    delta: str


class ReasoningSummaryTextDelta(BaseModel):
    """``response.reasoning_summary_text.delta``: text appended to a reasoning item."""

    response_id: str
    item_id: str
    delta: str


class FunctionCallArgumentsDelta(BaseModel):
    """``response.function_call_arguments.delta``: text appended to a call's arguments."""

    response_id: str
    item_id: str
    delta: str


class OutputItemDone(BaseModel):
    """``response.output_item.done``: an output item is complete."""

    response_id: str
    output_index: int
    item: OutputItem


class ResponseCompleted(BaseModel):
    """``response.completed``: done (final)."""

    response_id: str
    status: Literal["completed"] = "completed"
    usage: Usage


class ResponseIncomplete(BaseModel):
    """``response.incomplete``: stopped early (final)."""

    response_id: str
    status: Literal["incomplete"] = "incomplete"
    incomplete_details: IncompleteDetails
    usage: Usage


class ResponseFailed(BaseModel):
    """``response.failed``: generation failed (final)."""

    response_id: str
    status: Literal["failed"] = "failed"
    error: Problem


class ResponseCancelled(BaseModel):
    """``response.cancelled``: cancelled (final)."""

    response_id: str
    status: Literal["cancelled"] = "cancelled"


class StreamError(BaseModel):
    """``error``: a problem not tied to one response; the stream cannot go on."""

    error: Problem


EventData = (
    ResponseCreated
    | OutputItemAdded
    | OutputTextDelta
    | ReasoningSummaryTextDelta
    | FunctionCallArgumentsDelta
    | OutputItemDone
    | ResponseCompleted
    | ResponseIncomplete
    | ResponseFailed
    | ResponseCancelled
    | StreamError
)

#: Event name of each event data type.
EVENT_NAMES: dict[type[BaseModel], str] = {
    ResponseCreated: "response.created",
    OutputItemAdded: "response.output_item.added",
    OutputTextDelta: "response.output_text.delta",
    ReasoningSummaryTextDelta: "response.reasoning_summary_text.delta",
    FunctionCallArgumentsDelta: "response.function_call_arguments.delta",
    OutputItemDone: "response.output_item.done",
    ResponseCompleted: "response.completed",
    ResponseIncomplete: "response.incomplete",
    ResponseFailed: "response.failed",
    ResponseCancelled: "response.cancelled",
    StreamError: "error",
}

#: Events that end a stream; exactly one ends each.
FINAL_EVENTS = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "response.cancelled", "error"}
)

#: The final event of each final response status.
FINAL_EVENT_OF_STATUS: dict[ResponseStatus, str] = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
    "cancelled": "response.cancelled",
}


@dataclass(frozen=True)
class ResponseEvent:
    """One numbered event of a response stream."""

    id: int
    data: EventData

    @property
    def event(self) -> str:
        """The SSE event name."""
        return EVENT_NAMES[type(self.data)]

    @property
    def is_final(self) -> bool:
        """Whether this event ends the stream."""
        return self.event in FINAL_EVENTS

    def to_sse(self) -> bytes:
        """The event as SSE bytes: ``id``, ``event`` and one line of JSON ``data``."""
        return sse_frame(self.id, self.event, self.data.model_dump_json())


def sse_frame(event_id: int | None, event: str, data: str) -> bytes:
    """One SSE event: ``id``, ``event`` and one line of JSON ``data``.

    Without an id (``None``) a browser keeps the last one it saw, and resumes after it.
    """
    head = "" if event_id is None else f"id: {event_id}\n"
    return f"{head}event: {event}\ndata: {data}\n\n".encode()
