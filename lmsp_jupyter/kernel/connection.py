"""How the kernel reaches the LMSP service: the client every ask uses, over HTTP only."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from ..client import LmspClient, ProblemError
from ..protocol.events import ResponseEvent
from ..protocol.models import Model
from ..protocol.tasks import Task
from .state import kernel_problem


class TaskClient(Protocol):
    """The part of :class:`~lmsp_jupyter.client.LmspClient` the kernel uses."""

    def models(self) -> list[Model]: ...

    def create_task(self, request: Mapping[str, Any]) -> Task: ...

    def get_task(self, task_id: str) -> Task: ...

    def list_tasks(self) -> list[Task]: ...

    def cancel_task(self, task_id: str) -> Task: ...

    def task_events(self, task_id: str, *, after: int | None = None) -> Iterator[ResponseEvent]: ...


_client: TaskClient | None = None


def connect(client: TaskClient | None = None) -> None:
    """Send every later ask through ``client``; ``None`` finds the service again when needed."""
    global _client
    _client = client


def current_client() -> TaskClient:
    """The client of later asks: the one given to :func:`connect`, else a discovered one."""
    global _client
    if _client is None:
        _client = LmspClient()
    return _client


def problem_of(error: Exception) -> dict[str, Any]:
    """A client error as the problem document an ask shows."""
    if isinstance(error, ProblemError):
        return error.problem.model_dump(mode="json")
    return kernel_problem("service_unreachable", "LMSP service unreachable", str(error))
