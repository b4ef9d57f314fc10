"""What one round of an ask leaves to the next: its live timing and its function calls.

An :class:`~.answer.Answer` runs rounds of tasks; these are the rules it applies between
them, without its locks and threads: how long a round took as the kernel watched it, which
decision a call starts with, what a call's output is, and the request that continues the loop.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ..protocol.events import (
    EventData,
    FunctionCallArgumentsDelta,
    OutputTextDelta,
    ReasoningSummaryTextDelta,
)
from ..protocol.items import McpApprovalRequest, OutputFunctionCall
from ..protocol.responses import Response
from .mcp import McpApprovals
from .state import Decision, ToolCallState
from .tools import DECLINED, Tool, ToolPolicy

#: Events that carry generated tokens.
_OUTPUT_DELTAS = (OutputTextDelta, ReasoningSummaryTextDelta, FunctionCallArgumentsDelta)
#: Faster than this, events were replayed from the store rather than watched as generated.
_LIVE_TOKENS_PER_SECOND = 1000.0

#: Why a denied MCP call did not run, as the model is told.
MCP_DECLINED = "The user declined to run this tool."

_FIRST_DECISION: dict[ToolPolicy, Decision] = {
    "ask": "pending",
    "always": "auto",
    "never": "denied",
}


class RoundClock:
    """The monotonic times of a round's first output delta and of its last event since."""

    def __init__(self) -> None:
        self._times: list[float] = []

    def observe(self, data: EventData) -> None:
        """Note an event of the round as it arrives."""
        if self._times or isinstance(data, _OUTPUT_DELTAS):
            self._times[1:] = [time.monotonic()]

    def seconds(self, response: Response) -> float | None:
        """Seconds from the first output delta to the end, if the round was watched live."""
        times = self._times
        if len(times) < 2 or response.usage is None:
            return None
        seconds = times[1] - times[0]
        if seconds <= 0 or response.usage.output_tokens / seconds > _LIVE_TOKENS_PER_SECOND:
            return None
        return round(seconds, 3)


def open_call(call: OutputFunctionCall, tools: Mapping[str, Tool]) -> ToolCallState:
    """A call as its round ends: decided by its tool's policy, or pending the user's decision."""
    tool = tools.get(call.name)
    return ToolCallState(
        name=call.name,
        arguments=call.arguments,
        decision=_FIRST_DECISION[tool.policy if tool else "never"],
        runs_in=tool.runs_in if tool else "kernel",
    )


def open_approval(request: McpApprovalRequest, approvals: McpApprovals) -> ToolCallState:
    """An MCP call as its round ends: approved for the session, or pending the user's decision."""
    allowed = approvals.allows(request.server_label, request.name)
    return ToolCallState(
        name=request.name,
        arguments=request.arguments,
        decision="auto" if allowed else "pending",
        server_label=request.server_label,
    )


def call_output(
    call: ToolCallState, tools: Mapping[str, Tool], performed: str | None = None
) -> str | None:
    """What the model gets back for a decided call: the tool's output, or why there is none;
    ``None`` for an MCP call, which the service runs (its ``mcp_call`` has the output).

    ``performed`` is what JupyterLab reported doing for an approved notebook tool's call
    (:mod:`.notebook_tools`); it is the output of such a call only, never of a kernel's tool.
    """
    if call.server_label is not None:
        return None
    tool = tools.get(call.name)
    if tool is None:
        return f"error: there is no tool named {call.name!r}"
    if call.decision == "denied":
        return DECLINED
    if tool.runs_in == "notebook" and performed is not None:
        return performed
    return tool.run(call.arguments)


def continuation(
    request: Mapping[str, Any], last: Response, calls: Mapping[str, ToolCallState]
) -> dict[str, Any]:
    """The next round of ``request``: the outputs of ``last``'s calls after that response,
    and the decision on each of its MCP approval requests."""
    outputs: list[dict[str, Any]] = []
    for item in last.output:
        if isinstance(item, OutputFunctionCall):
            output = calls[item.call_id].output
            outputs.append(
                {"type": "function_call_output", "call_id": item.call_id, "output": output}
            )
        elif isinstance(item, McpApprovalRequest):
            approve = calls[item.id].decision != "denied"
            response = {"type": "mcp_approval_response", "approval_request_id": item.id}
            outputs.append(
                {**response, "approve": True}
                if approve
                else {**response, "approve": False, "reason": MCP_DECLINED}
            )
    following = {**request, "input": outputs, "previous_response_id": last.id}
    if "tool_choice" in following:
        following["tool_choice"] = "auto"  # a forced choice holds for the first round only
    return following
