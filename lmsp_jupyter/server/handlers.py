"""The ``/lmsp/v1`` endpoints: parse, call the service, write."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncGenerator, AsyncIterator

from jupyter_server.utils import url_path_join

from .. import __version__
from ..engine.generation import CancelToken
from ..protocol.errors import LmspError
from ..protocol.events import ResponseEvent
from ..protocol.models import AuthInfo, ServiceDocument, ServiceInfo
from ..protocol.requests import parse_response_request
from ..protocol.tasks import Task, TaskList
from ..service.idempotency import Answer, Claim
from ..service.responses import ResponseRun
from .auth import JUPYTER_SCOPES
from .base import LmspHandler
from .openapi import OpenApiHandler
from .sse import EventStream

#: The ends of a stream that its key answers again (the others free the key).
_ANSWERED = ("completed", "incomplete")
#: Query arguments ``metadata.KEY=VALUE`` filter a task listing (LMSP 1.0 section 7).
METADATA_PREFIX = "metadata."


class ServiceHandler(LmspHandler):
    """``GET /lmsp/v1``: the service document."""

    def get(self) -> None:
        document = ServiceDocument(
            service=ServiceInfo(name="lmsp-jupyter", version=__version__),
            capabilities=[
                "streaming",
                "tasks",
                "conversations",
                "tools",
                "structured_output",
                "reasoning",
            ],
            auth=AuthInfo(scopes=sorted(JUPYTER_SCOPES)),
        )
        self.write_model(document)


class ModelsHandler(LmspHandler):
    """``GET /lmsp/v1/models``: every model found on this machine."""

    scopes = {"GET": "models:read"}

    def get(self) -> None:
        self.write_model(self.models.list())


class ModelHandler(LmspHandler):
    """``GET /lmsp/v1/models/{model_id}``: one model."""

    scopes = {"GET": "models:read"}

    def get(self, model_id: str) -> None:
        self.write_model(self.models.get(model_id))  # Tornado has percent-decoded it


class ModelLoadHandler(LmspHandler):
    """``POST /lmsp/v1/models/{model_id}/load``: load a model now; the model once loaded."""

    scopes = {"POST": "models:write"}

    async def post(self, model_id: str) -> None:
        self.write_model(await self.models.load(model_id))


class ModelUnloadHandler(LmspHandler):
    """``POST /lmsp/v1/models/{model_id}/unload``: unload an idle model; the model after."""

    scopes = {"POST": "models:write"}

    async def post(self, model_id: str) -> None:
        self.write_model(await self.models.unload(model_id))


class ResponsesHandler(LmspHandler):
    """``POST /lmsp/v1/responses``: answer now, or stream the answer as SSE."""

    scopes = {"POST": "responses:write"}
    _stream: EventStream | None = None

    async def post(self) -> None:
        outcome = await self.idempotent(self._respond, wait_if_running=False)
        if outcome is None or self._finished:
            return
        if outcome.replayed and self.json_body().get("stream") is True:
            await EventStream(self, self.settings["lmsp_keepalive_seconds"]).replay(outcome.body)
            self.finish()
            return
        self.set_status(outcome.status)
        self.finish(outcome.body)

    async def _respond(self, claim: Claim | None) -> Answer:
        request = parse_response_request(self.json_body())
        run = await self.service.start(request, self.principal.owner)
        if not request.stream:
            return 200, (await self.service.complete(run)).model_dump_json()
        stream = self._stream = EventStream(self, self.settings["lmsp_keepalive_seconds"])
        await stream.send(self._kept(self.service.events(run, CancelToken()), run, stream, claim))
        self.finish()
        if run.status not in _ANSWERED:
            return None  # the client left, or generation failed: no answer to give again
        return 200, stream.transcript

    async def _kept(
        self,
        events: AsyncGenerator[ResponseEvent, None],
        run: ResponseRun,
        stream: EventStream,
        claim: Claim | None,
    ) -> AsyncIterator[ResponseEvent]:
        """``events``, with the key's answer recorded before the final event goes out: a
        client that received the whole stream gets it again from its key, even when the
        process dies right after."""
        async with contextlib.aclosing(events):
            async for event in events:
                if claim is not None and event.is_final and run.status in _ANSWERED:
                    try:
                        claim.answer(200, stream.transcript + event.to_sse().decode())
                    except Exception:  # the stream still ends; the key is recorded after it
                        self.log.exception("the answer of %s could not be kept", run.id)
                yield event

    def on_connection_close(self) -> None:
        if self._stream is not None:
            self._stream.close()


class ResponseHandler(LmspHandler):
    """``GET /lmsp/v1/responses/{response_id}``: a stored response."""

    scopes = {"GET": "responses:read"}

    def get(self, response_id: str) -> None:
        self.write_model(self.service.stored(response_id, self.principal.owner))


class TasksHandler(LmspHandler):
    """``POST /lmsp/v1/tasks`` starts a task; ``GET`` lists them, newest first."""

    scopes = {"GET": "tasks:read", "POST": "tasks:write"}

    async def post(self) -> None:
        owner = self.principal.owner

        async def create(claim: Claim | None) -> tuple[int, str]:
            def keep(db: sqlite3.Connection, task: Task) -> None:
                if claim is not None:  # the key's answer is stored with the task
                    claim.keep(db, 202, task.model_dump_json())

            task = await self.tasks.create(self.json_body(), owner, keep)
            return 202, task.model_dump_json()

        outcome = await self.idempotent(create, wait_if_running=True)
        assert outcome is not None  # creating a task always has an answer
        task = Task.model_validate_json(outcome.body)
        if outcome.replayed:  # a replay shows the task as it stands now
            task = self.tasks.get(task.id, owner)
        self.set_header("Location", url_path_join(self.base_url, "lmsp/v1/tasks", task.id))
        self.write_model(task, status=202)

    def get(self) -> None:
        limit = _integer(self.get_argument("limit", "20"), "limit")
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

    scopes = {"GET": "tasks:read"}

    def get(self, task_id: str) -> None:
        self.write_model(self.tasks.get(task_id, self.principal.owner))


class TaskCancelHandler(LmspHandler):
    """``POST /lmsp/v1/tasks/{task_id}/cancel``."""

    scopes = {"POST": "tasks:write"}

    def post(self, task_id: str) -> None:
        self.write_model(self.tasks.cancel(task_id, self.principal.owner))


class TaskEventsHandler(LmspHandler):
    """``GET /lmsp/v1/tasks/{task_id}/events``: replay after the cursor, then live (6.4)."""

    scopes = {"GET": "tasks:read"}
    _stream: EventStream | None = None

    async def get(self, task_id: str) -> None:
        after = self.get_argument("after", None)
        cursor = (
            _integer(after, "after")
            if after is not None
            else _integer(self.request.headers.get("Last-Event-ID", "0"), "Last-Event-ID")
        )
        events = self.tasks.follow(task_id, self.principal.owner, cursor)
        self._stream = EventStream(self, self.settings["lmsp_keepalive_seconds"])
        await self._stream.send(events)
        self.finish()

    def on_connection_close(self) -> None:
        if self._stream is not None:
            self._stream.close()


class NotFoundHandler(LmspHandler):
    """Any other path under ``/lmsp/``."""

    def get(self, path: str | None = None) -> None:
        raise LmspError("not_found", f"no LMSP endpoint at {self.request.path}")

    head = post = put = patch = delete = get


def _integer(value: str, param: str) -> int:
    """A non-negative integer parameter; anything else → ``invalid_request`` naming it."""
    if not (value.isascii() and value.isdigit()):
        raise LmspError("invalid_request", f"{param} must be a non-negative integer", param=param)
    return int(value)


#: The LMSP routes; the extension app puts the server's base_url before each.
default_handlers: list[tuple[str, type[LmspHandler]]] = [
    (r"/lmsp/v1/?", ServiceHandler),
    (r"/lmsp/v1/models/?", ModelsHandler),
    (r"/lmsp/v1/models/(.+)/load", ModelLoadHandler),
    (r"/lmsp/v1/models/(.+)/unload", ModelUnloadHandler),
    (r"/lmsp/v1/models/(.+)", ModelHandler),
    (r"/lmsp/v1/responses/?", ResponsesHandler),
    (r"/lmsp/v1/responses/([^/]+)", ResponseHandler),
    (r"/lmsp/v1/tasks/?", TasksHandler),
    (r"/lmsp/v1/tasks/([^/]+)", TaskHandler),
    (r"/lmsp/v1/tasks/([^/]+)/cancel", TaskCancelHandler),
    (r"/lmsp/v1/tasks/([^/]+)/events", TaskEventsHandler),
    (r"/lmsp/v1/openapi.json", OpenApiHandler),
    (r"/lmsp(/.*)?", NotFoundHandler),
]
