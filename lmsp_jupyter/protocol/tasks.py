"""Tasks: a response run in the background, its events kept for replay (LMSP 1.0 section 7)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from .errors import Problem
from .requests import Metadata
from .responses import Response

TaskStatus = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
FINAL_TASK_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})


class TaskRequest(BaseModel):
    """``POST /lmsp/v1/tasks``: a response request to run in the background."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["response"]
    request: dict[str, Any] = Field(description="A response request (6.1); `stream` is ignored.")


class Task(BaseModel):
    """A background run of one response."""

    id: str
    object: Literal["task"] = "task"
    type: Literal["response"] = "response"
    status: TaskStatus
    created_at: int
    started_at: int | None = None
    completed_at: int | None = None
    response_id: str
    last_event_id: int = 0
    result: Response | None = None
    error: Problem | None = None
    metadata: Metadata = Field(
        default_factory=dict, description="The request's `metadata`; `{}` when it had none."
    )
    queue_position: int | None = Field(
        default=None, description="1 = next to run; only while queued."
    )

    @model_serializer(mode="wrap")
    def _queue_position_only_while_queued(self, handler: Any) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("queue_position") is None:
            data.pop("queue_position", None)
        return data


class TaskList(BaseModel):
    """``GET /lmsp/v1/tasks``: newest first."""

    object: Literal["list"] = "list"
    data: list[Task]
