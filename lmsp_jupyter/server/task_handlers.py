"""The ``/lmsp/v1/tasks`` endpoints: start, list, read, cancel and follow tasks."""

from __future__ import annotations

from jupyter_server.utils import url_path_join

from ..protocol.errors import LmspError
from ..protocol.tasks import Task, TaskList
from ..service.idempotency import Claim
from .base import LmspHandler, non_negative_integer
from .operations import CREATE_ERRORS, Operation, events_reply, json_reply, ref
from .sse import StreamingHandler

#: Query arguments ``metadata.KEY=VALUE`` filter a task listing (LMSP 1.0 section 7).
METADATA_PREFIX = "metadata."


class TasksHandler(LmspHandler):
    """``POST /lmsp/v1/tasks`` starts a task; ``GET`` lists them, newest first."""

    operations = {
        "get": Operation(
            "listTasks",
            "List tasks, newest first",
            "tasks",
            {"200": json_reply(ref("TaskList"), "The tasks.")},
            scope="tasks:read",
            parameters=("limit", "status", "metadata"),
        ),
        "post": Operation(
            "createTask",
            "Start a response as a background task",
            "tasks",
            {
                "202": json_reply(
                    ref("Task"),
                    "The task (replayed for a known `Idempotency-Key`: as it stands now).",
                    "Location",
                    "Idempotent-Replayed",
                )
            },
            scope="tasks:write",
            errors=(*CREATE_ERRORS, 503),
            parameters=("Idempotency-Key",),
            body="TaskRequest",
        ),
    }

    async def post(self) -> None:
        owner = self.principal.owner
        self.check_task_limit()

        async def create(claim: Claim | None) -> tuple[int, str]:
            task = await self.tasks.create(self.json_body(), owner, claim)
            return 202, task.model_dump_json()

        outcome = await self.idempotent(create, wait_if_running=True)
        assert outcome is not None  # creating a task always has an answer
        task = Task.model_validate_json(outcome.body)
        if outcome.replayed:  # a replay shows the task as it stands now
            task = self.tasks.get(task.id, owner)
        self.set_header("Location", url_path_join(self.base_url, "lmsp/v1/tasks", task.id))
        self.write_model(task, status=202)

    def get(self) -> None:
        limit = non_negative_integer(self.get_argument("limit", "20"), "limit")
        status = self.get_argument("status", None)
        tasks = self.tasks.list(self.principal.owner, limit, status, self._metadata_filter())
        self.write_model(TaskList(data=tasks))

    def _metadata_filter(self) -> dict[str, str]:
        """The ``metadata.KEY=VALUE`` query arguments; a key given twice → ``invalid_request``."""
        pairs: dict[str, str] = {}
        for name in self.request.query_arguments:
            if name.startswith(METADATA_PREFIX):
                values = self.get_query_arguments(name)
                if len(values) > 1:
                    raise LmspError("invalid_request", f"{name} is given twice", param=name)
                # Tornado decodes argument names as Latin-1, values as UTF-8
                key = name.removeprefix(METADATA_PREFIX).encode("latin-1").decode(errors="replace")
                pairs[key] = values[0]
        return pairs


class TaskHandler(LmspHandler):
    """``GET /lmsp/v1/tasks/{task_id}``: a task and, when final, its result."""

    operations = {
        "get": Operation(
            "getTask",
            "A task and, once final, its result",
            "tasks",
            {"200": json_reply(ref("Task"), "The task.")},
            scope="tasks:read",
            errors=(404,),
        )
    }

    def get(self, task_id: str) -> None:
        self.write_model(self.tasks.get(task_id, self.task_owner(task_id)))


class TaskCancelHandler(LmspHandler):
    """``POST /lmsp/v1/tasks/{task_id}/cancel``."""

    operations = {
        "post": Operation(
            "cancelTask",
            "Cancel a task (a final task is returned unchanged)",
            "tasks",
            {"200": json_reply(ref("Task"), "The task.")},
            scope="tasks:write",
            errors=(404,),
        )
    }

    def post(self, task_id: str) -> None:
        self.write_model(self.tasks.cancel(task_id, self.task_owner(task_id)))


class TaskEventsHandler(StreamingHandler):
    """``GET /lmsp/v1/tasks/{task_id}/events``: replay after the cursor, then live (6.4)."""

    operations = {
        "get": Operation(
            "followTaskEvents",
            "The task's events: replay after the cursor, then live until the final one",
            "tasks",
            {"200": events_reply("")},
            scope="tasks:read",
            errors=(404, 410),
            parameters=("after", "Last-Event-ID"),
        )
    }

    async def get(self, task_id: str) -> None:
        after = self.get_argument("after", None)
        cursor = (
            non_negative_integer(after, "after")
            if after is not None
            else non_negative_integer(
                self.request.headers.get("Last-Event-ID", "0"), "Last-Event-ID"
            )
        )
        await self.send_events(self.tasks.follow(task_id, self.task_owner(task_id), cursor))
