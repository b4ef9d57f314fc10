"""Server-sent events of a response (LMSP 1.0 sections 6.3, 6.4 and 11.4)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from .errors import Problem
from .items import OutputItem, OutputText, SummaryText
from .logprobs import Logprob, omitted_if_none
from .responses import IncompleteDetails, Response, ResponseStatus, Usage


class ResponseCreated(BaseModel):
    """``response.created``: the response exists."""

    response_id: str
    status: Literal["in_progress"] = "in_progress"
    response: Response


class ResponseInProgress(BaseModel):
    """``response.in_progress``: generation has started (11.4)."""

    response_id: str
    status: Literal["in_progress"] = "in_progress"
    response: Response


class OutputItemAdded(BaseModel):
    """``response.output_item.added``: an output item starts."""

    response_id: str
    output_index: int
    item: OutputItem


class ContentPartAdded(BaseModel):
    """``response.content_part.added``: a message's text part starts (11.4)."""

    response_id: str
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class OutputTextDelta(BaseModel):
    """``response.output_text.delta``: text appended to a message item."""

    response_id: str
    item_id: str
    output_index: int
    content_index: int
    delta: str
    #: The logprobs of the tokens of ``delta``, when asked for (11.1); left out otherwise.
    logprobs: list[Logprob] | None = Field(default=None, exclude_if=omitted_if_none)


class OutputTextDone(BaseModel):
    """``response.output_text.done``: a text part is complete (11.4)."""

    response_id: str
    item_id: str
    output_index: int
    content_index: int
    text: str


class ContentPartDone(BaseModel):
    """``response.content_part.done``: a message's text part is complete (11.4)."""

    response_id: str
    item_id: str
    output_index: int
    content_index: int
    part: OutputText


class ReasoningSummaryPartAdded(BaseModel):
    """``response.reasoning_summary_part.added``: a reasoning summary part starts."""

    response_id: str
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


class ReasoningSummaryTextDelta(BaseModel):
    """``response.reasoning_summary_text.delta``: text appended to a reasoning item."""

    response_id: str
    item_id: str
    output_index: int
    summary_index: int
    delta: str


class ReasoningSummaryTextDone(BaseModel):
    """``response.reasoning_summary_text.done``: a reasoning summary's text is complete."""

    response_id: str
    item_id: str
    output_index: int
    summary_index: int
    text: str


class ReasoningSummaryPartDone(BaseModel):
    """``response.reasoning_summary_part.done``: a reasoning summary part is complete."""

    response_id: str
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


class FunctionCallArgumentsDelta(BaseModel):
    """``response.function_call_arguments.delta``: text appended to a call's arguments."""

    response_id: str
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDone(BaseModel):
    """``response.function_call_arguments.done``: a call's arguments are complete (11.4)."""

    response_id: str
    item_id: str
    output_index: int
    name: str
    arguments: str


class McpCallArgumentsDelta(BaseModel):
    """``response.mcp_call_arguments.delta``: text appended to an MCP call's arguments (11.6)."""

    response_id: str
    item_id: str
    output_index: int
    delta: str


class McpCallArgumentsDone(BaseModel):
    """``response.mcp_call_arguments.done``: an MCP call's arguments are complete (11.6)."""

    response_id: str
    item_id: str
    output_index: int
    arguments: str


class McpItemEvent(BaseModel):
    """An MCP item's progress (11.6): ``response.mcp_call.in_progress``, ``.completed``,
    ``.failed`` and ``response.mcp_list_tools.*`` alike."""

    response_id: str
    item_id: str
    output_index: int


class McpCallInProgress(McpItemEvent):
    """``response.mcp_call.in_progress``: the service is running the call."""


class McpCallCompleted(McpItemEvent):
    """``response.mcp_call.completed``: the call returned its output."""


class McpCallFailed(McpItemEvent):
    """``response.mcp_call.failed``: the call ended with an error."""


class McpListToolsInProgress(McpItemEvent):
    """``response.mcp_list_tools.in_progress``: the server's tools are being listed."""


class McpListToolsCompleted(McpItemEvent):
    """``response.mcp_list_tools.completed``: the server's tools are listed."""


class McpListToolsFailed(McpItemEvent):
    """``response.mcp_list_tools.failed``: the server's tools could not be listed."""


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
    response: Response


class ResponseIncomplete(BaseModel):
    """``response.incomplete``: stopped early (final)."""

    response_id: str
    status: Literal["incomplete"] = "incomplete"
    incomplete_details: IncompleteDetails
    usage: Usage
    response: Response


class ResponseFailed(BaseModel):
    """``response.failed``: generation failed (final)."""

    response_id: str
    status: Literal["failed"] = "failed"
    error: Problem
    response: Response


class ResponseCancelled(BaseModel):
    """``response.cancelled``: cancelled (final)."""

    response_id: str
    status: Literal["cancelled"] = "cancelled"
    response: Response


class StreamError(BaseModel):
    """``error``: a problem not tied to one response; the stream cannot go on."""

    error: Problem


EventData = (
    ResponseCreated
    | ResponseInProgress
    | OutputItemAdded
    | ContentPartAdded
    | OutputTextDelta
    | OutputTextDone
    | ContentPartDone
    | ReasoningSummaryPartAdded
    | ReasoningSummaryTextDelta
    | ReasoningSummaryTextDone
    | ReasoningSummaryPartDone
    | FunctionCallArgumentsDelta
    | FunctionCallArgumentsDone
    | McpCallArgumentsDelta
    | McpCallArgumentsDone
    | McpCallInProgress
    | McpCallCompleted
    | McpCallFailed
    | McpListToolsInProgress
    | McpListToolsCompleted
    | McpListToolsFailed
    | OutputItemDone
    | ResponseCompleted
    | ResponseIncomplete
    | ResponseFailed
    | ResponseCancelled
    | StreamError
)

#: The final events that carry the response as it ended (completed, incomplete or cancelled).
EndedWithResponse = ResponseCompleted | ResponseIncomplete | ResponseCancelled
#: The final events that carry a problem instead (the response failed, or the stream did).
EndedWithError = ResponseFailed | StreamError

#: Event name of each event data type.
EVENT_NAMES: dict[type[BaseModel], str] = {
    ResponseCreated: "response.created",
    ResponseInProgress: "response.in_progress",
    OutputItemAdded: "response.output_item.added",
    ContentPartAdded: "response.content_part.added",
    OutputTextDelta: "response.output_text.delta",
    OutputTextDone: "response.output_text.done",
    ContentPartDone: "response.content_part.done",
    ReasoningSummaryPartAdded: "response.reasoning_summary_part.added",
    ReasoningSummaryTextDelta: "response.reasoning_summary_text.delta",
    ReasoningSummaryTextDone: "response.reasoning_summary_text.done",
    ReasoningSummaryPartDone: "response.reasoning_summary_part.done",
    FunctionCallArgumentsDelta: "response.function_call_arguments.delta",
    FunctionCallArgumentsDone: "response.function_call_arguments.done",
    McpCallArgumentsDelta: "response.mcp_call_arguments.delta",
    McpCallArgumentsDone: "response.mcp_call_arguments.done",
    McpCallInProgress: "response.mcp_call.in_progress",
    McpCallCompleted: "response.mcp_call.completed",
    McpCallFailed: "response.mcp_call.failed",
    McpListToolsInProgress: "response.mcp_list_tools.in_progress",
    McpListToolsCompleted: "response.mcp_list_tools.completed",
    McpListToolsFailed: "response.mcp_list_tools.failed",
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

    def data_json(self) -> str:
        """The event's data as sent and stored: ``type`` and ``sequence_number`` first (11.4)."""
        return event_data_json(self.id, self.event, self.data.model_dump_json())


def event_data_json(event_id: int, event: str, fields: str) -> str:
    """An event's JSON data: ``type`` (its name), ``sequence_number`` (its id), then ``fields``."""
    head = f'{{"type":{json.dumps(event)},"sequence_number":{event_id}'
    return head + ("}" if fields == "{}" else "," + fields[1:])
