"""``AnswerState``: what one ask shows, the widget's ``state`` and the task MIME bundle."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ..protocol.responses import Response

AnswerStatus = Literal[
    "queued", "in_progress", "requires_action", "completed", "incomplete", "failed", "cancelled"
]
Decision = Literal["pending", "approved", "denied", "auto"]
#: Where a tool runs: in the kernel (``@tool``), or in JupyterLab on its notebook (notebook tools).
RunsIn = Literal["kernel", "notebook"]

#: Statuses after which an ask does nothing more.
FINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})


class Round(BaseModel):
    """One task of an ask; a tool loop adds a round per continuation."""

    task_id: str
    response: Response | None = Field(None, description="The final response once done.")
    seconds: float | None = Field(
        None,
        description="Seconds from the first output token to the end, as the kernel watched "
        "the round live (null if it only saw a replay): tokens/s of a saved answer.",
    )


class ToolCallState(BaseModel):
    """A function call of a finished round, or an MCP call waiting for approval (an
    ``mcp_approval_request``, by its id), and what became of it."""

    name: str
    arguments: str
    decision: Decision
    output: str | None = Field(None, description="Text given back to the model; null until run.")
    runs_in: RunsIn = Field(
        "kernel",
        description="Where the call runs once approved: JupyterLab's view of the ask performs "
        "a notebook tool's call on its notebook. Present only for notebook tools.",
        exclude_if=lambda runs_in: runs_in == "kernel",
    )
    server_label: str | None = Field(
        None,
        description="The MCP server whose tool this is: the service runs the call once "
        "approved, and its result is an mcp_call item of the next round. Present only for "
        "MCP calls.",
        exclude_if=lambda label: label is None,
    )

    def title(self) -> str:
        """The tool as the user knows it: ``name``, or ``label:name`` for an MCP tool."""
        return self.name if self.server_label is None else f"{self.server_label}:{self.name}"


class AnswerState(BaseModel):
    """The durable state of one ask (contract: ``application/vnd.lmsp.task+json``)."""

    version: Literal[1] = 1
    ask_id: str
    kernel_id: str | None = None
    model: str
    status: AnswerStatus = "queued"
    rounds: list[Round] = Field(default_factory=list)
    tool_calls: dict[str, ToolCallState] = Field(default_factory=dict)
    error: dict[str, Any] | None = Field(None, description="A problem document when failed.")
    prompt: str | None = Field(
        None, description="The prompt as sent, when it carries notebook context (shown folded)."
    )


def kernel_problem(code: str, title: str, detail: str) -> dict[str, Any]:
    """A problem document for a failure found in the kernel rather than by the service."""
    return {"type": "about:blank", "title": title, "status": 500, "code": code, "detail": detail}
