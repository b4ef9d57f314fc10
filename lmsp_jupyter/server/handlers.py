"""The ``/lmsp/v1`` endpoints: parse, call the service, write."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence

from jupyter_server.utils import url_path_join

from .. import __version__
from ..protocol.chat import (
    ChatCompletionRequest,
    ChunkTranslator,
    as_response_request,
    chat_completion,
    chat_param,
)
from ..protocol.errors import LmspError
from ..protocol.events import ResponseEvent
from ..protocol.models import AuthInfo, ServiceDocument, ServiceInfo
from ..protocol.requests import ResponseRequest, parse_response_request, validate_request
from ..protocol.responses import Response
from ..protocol.tasks import Task, TaskList
from ..service.idempotency import Answer, Claim
from ..service.responses import ResponseRun
from .auth import JUPYTER_SCOPES
from .base import LmspHandler
from .openapi import OpenApiHandler
from .sse import EventStream, SseEvent, sse_frame

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


class _CreatingHandler(LmspHandler):
    """A ``POST`` that creates an answer, as JSON or as SSE, under an ``Idempotency-Key``."""

    _stream: EventStream | None = None

    async def post(self) -> None:
        outcome = await self.idempotent(self._respond, wait_if_running=False)
        if outcome is None or self._finished:
            return
        if outcome.replayed and self.json_body().get("stream") is True:
            await self._replay(outcome.body)
            self.finish()
            return
        self.set_status(outcome.status)
        self.finish(outcome.body)

    async def _respond(self, claim: Claim | None) -> Answer:
        raise NotImplementedError

    async def _replay(self, body: str) -> None:
        """Send a streamed answer again (its key was used before)."""
        await EventStream(self, self.settings["lmsp_keepalive_seconds"]).replay(body)

    async def _stream_answer(
        self,
        run: ResponseRun,
        claim: Claim | None,
        render: Callable[[ResponseEvent], Sequence[SseEvent]] = lambda event: [event],
        head: Sequence[SseEvent] = (),
    ) -> Answer:
        """Generate ``run`` as SSE, each event as ``render`` shows it, after ``head``; the
        stream as sent is the answer its key keeps."""
        stream = self._stream = EventStream(self, self.settings["lmsp_keepalive_seconds"])
        await stream.send(self._kept(run, stream, claim, render, head))
        self.finish()
        if run.status not in _ANSWERED:
            return None  # the client left, or generation failed: no answer to give again
        return 200, stream.transcript

    async def _kept(
        self,
        run: ResponseRun,
        stream: EventStream,
        claim: Claim | None,
        render: Callable[[ResponseEvent], Sequence[SseEvent]],
        head: Sequence[SseEvent],
    ) -> AsyncIterator[SseEvent]:
        """The frames of ``run``'s events, with the key's answer recorded before those of the
        final event go out: a client that received the whole stream gets it again from its
        key, even when the process dies right after."""
        for frame in head:
            yield frame
        events = self.service.events(run)
        async with contextlib.aclosing(events):
            async for event in events:
                frames = render(event)
                if claim is not None and event.is_final and run.status in _ANSWERED:
                    rest = b"".join(sse_frame(frame) for frame in frames).decode()
                    try:
                        claim.answer(200, stream.transcript + rest)
                    except Exception:  # the stream still ends; the key is recorded after it
                        self.log.exception("the answer of %s could not be kept", run.id)
                for frame in frames:
                    yield frame

    def on_connection_close(self) -> None:
        if self._stream is not None:
            self._stream.close()


class ResponsesHandler(_CreatingHandler):
    """``POST /lmsp/v1/responses``: answer now, stream the answer as SSE, or run it in the
    background (11.2)."""

    scopes = {"POST": "responses:write"}

    async def _respond(self, claim: Claim | None) -> Answer:
        request = parse_response_request(self.json_body())
        if request.background:
            return await self._background(request, claim)
        run = await self.service.start(request, self.principal.owner)
        if not request.stream:
            return 200, (await self.service.complete(run)).model_dump_json()
        return await self._stream_answer(run, claim)

    async def _background(self, request: ResponseRequest, claim: Claim | None) -> Answer:
        """Run the request as a task: the queued response now, or the task's events. The
        queued response is the answer its key keeps, stored with the task; a replayed
        stream follows the task again."""
        owner = self.principal.owner
        queued: list[str] = []

        def keep(db: sqlite3.Connection, task: Task, response: Response) -> None:
            queued.append(response.model_dump_json())
            if claim is not None:
                claim.keep(db, 200, queued[0])

        task = await self.tasks.submit(request, owner, keep)
        if request.stream:
            await self._follow(task.id, 0)
        return 200, queued[0]

    async def _replay(self, body: str) -> None:
        if self.json_body().get("background") is True:
            response_id = Response.model_validate_json(body).id
            await self._follow(self.tasks.task_of_response(response_id, self.principal.owner), 0)
        else:
            await super()._replay(body)

    async def _follow(self, task_id: str, after: int) -> None:
        self._stream = EventStream(self, self.settings["lmsp_keepalive_seconds"])
        await self._stream.send(self.tasks.follow(task_id, self.principal.owner, after))
        self.finish()


class ChatCompletionsHandler(_CreatingHandler):
    """``POST /lmsp/v1/chat/completions``: OpenAI's Chat Completions on the same service (11.3)."""

    scopes = {"POST": "responses:write"}

    async def _respond(self, claim: Claim | None) -> Answer:
        chat = validate_request(ChatCompletionRequest, self.json_body())
        try:
            run = await self.service.start(as_response_request(chat), self.principal.owner)
        except LmspError as error:  # name the field as the chat request calls it
            error.param = chat_param(chat, error.param)
            raise
        if not chat.stream:
            return 200, chat_completion(await self.service.complete(run)).model_dump_json()
        include_usage = chat.stream_options is not None and chat.stream_options.include_usage
        translator = ChunkTranslator(run.response(), include_usage=include_usage)
        return await self._stream_answer(run, claim, translator.feed, [translator.first()])


class ResponseHandler(LmspHandler):
    """``GET /lmsp/v1/responses/{response_id}``: a stored or background response, or the
    events of a background one after ``starting_after`` (11.2)."""

    scopes = {"GET": "responses:read"}
    _stream: EventStream | None = None

    async def get(self, response_id: str) -> None:
        owner = self.principal.owner
        stream = self.get_argument("stream", "false")
        if stream not in ("true", "false"):
            raise LmspError("invalid_request", "stream must be true or false", param="stream")
        if stream == "true":
            after = _integer(self.get_argument("starting_after", "0"), "starting_after")
            events = self.tasks.follow(
                self.tasks.task_of_response(response_id, owner), owner, after
            )
            self._stream = EventStream(self, self.settings["lmsp_keepalive_seconds"])
            await self._stream.send(events)
            self.finish()
            return
        try:
            response = self.tasks.response(response_id, owner)
        except LmspError as error:
            if error.code != "response_not_found":
                raise
            response = self.service.stored(response_id, owner)
        self.write_model(response)

    def on_connection_close(self) -> None:
        if self._stream is not None:
            self._stream.close()


class ResponseCancelHandler(LmspHandler):
    """``POST /lmsp/v1/responses/{response_id}/cancel``: cancel a background response (11.2)."""

    scopes = {"POST": "tasks:write"}

    def post(self, response_id: str) -> None:
        owner = self.principal.owner
        self.tasks.cancel(self.tasks.task_of_response(response_id, owner), owner)
        self.write_model(self.tasks.response(response_id, owner))


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


#: The largest integer SQLite holds: a larger cursor or limit means the same as this one.
_LARGEST = 2**63 - 1


def _integer(value: str, param: str) -> int:
    """A non-negative integer parameter; anything else → ``invalid_request`` naming it."""
    if not (value.isascii() and value.isdigit()):
        raise LmspError("invalid_request", f"{param} must be a non-negative integer", param=param)
    digits = value.lstrip("0")
    return _LARGEST if len(digits) > len(str(_LARGEST)) else min(int(digits or "0"), _LARGEST)


#: The LMSP routes; the extension app puts the server's base_url before each.
default_handlers: list[tuple[str, type[LmspHandler]]] = [
    (r"/lmsp/v1/?", ServiceHandler),
    (r"/lmsp/v1/models/?", ModelsHandler),
    (r"/lmsp/v1/models/(.+)/load", ModelLoadHandler),
    (r"/lmsp/v1/models/(.+)/unload", ModelUnloadHandler),
    (r"/lmsp/v1/models/(.+)", ModelHandler),
    (r"/lmsp/v1/responses/?", ResponsesHandler),
    (r"/lmsp/v1/responses/([^/]+)", ResponseHandler),
    (r"/lmsp/v1/responses/([^/]+)/cancel", ResponseCancelHandler),
    (r"/lmsp/v1/chat/completions/?", ChatCompletionsHandler),
    (r"/lmsp/v1/tasks/?", TasksHandler),
    (r"/lmsp/v1/tasks/([^/]+)", TaskHandler),
    (r"/lmsp/v1/tasks/([^/]+)/cancel", TaskCancelHandler),
    (r"/lmsp/v1/tasks/([^/]+)/events", TaskEventsHandler),
    (r"/lmsp/v1/openapi.json", OpenApiHandler),
    (r"/lmsp(/.*)?", NotFoundHandler),
]
