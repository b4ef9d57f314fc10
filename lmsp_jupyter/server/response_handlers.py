"""The ``/lmsp/v1`` endpoints that create and read responses: LMSP's own and Chat Completions."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Sequence

from ..protocol.chat import ChatCompletionRequest, as_response_request, chat_param
from ..protocol.chat_answers import ChunkTranslator, chat_completion
from ..protocol.completions import (
    CompletionChunks,
    CompletionRequest,
    completion_param,
    text_completion,
)
from ..protocol.completions import as_response_request as completion_as_response_request
from ..protocol.errors import LmspError
from ..protocol.events import ResponseEvent
from ..protocol.requests import ResponseRequest, parse_response_request, validate_request
from ..protocol.responses import Response
from ..service.idempotency import Answer, Claim
from ..service.run import ResponseRun
from .base import LmspHandler, non_negative_integer
from .operations import (
    CHAT_REPLY,
    COMPLETION_REPLY,
    CREATE_ERRORS,
    Operation,
    events_reply,
    json_reply,
    ref,
)
from .sse import EventStream, SsePayload, StreamingHandler, sse_frame

#: The ends of a stream that its key answers again (the others free the key).
_ANSWERED = ("completed", "incomplete")


class _CreatingHandler(StreamingHandler):
    """A ``POST`` that creates an answer, as JSON or as SSE, under an ``Idempotency-Key``."""

    async def post(self) -> None:
        if self._background_requested():
            self.check_task_limit()
            outcome = await self.idempotent(self._respond, wait_if_running=False)
        else:
            with self.limits.request(self.principal.owner):
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

    def _background_requested(self) -> bool:
        """Whether the body asks for a task (a body refused later asks for nothing here)."""
        try:
            return self.json_body().get("background") is True
        except LmspError:
            return False

    async def _replay(self, body: str) -> None:
        """Send a streamed answer again (its key was used before)."""
        await self.event_stream().replay(body)

    async def _stream_answer(
        self,
        run: ResponseRun,
        claim: Claim | None,
        render: Callable[[ResponseEvent], Sequence[SsePayload]] = lambda event: [event],
        head: Sequence[SsePayload] = (),
    ) -> Answer:
        """Generate ``run`` as SSE, each event as ``render`` shows it, after ``head``; the
        stream as sent is the answer its key keeps."""
        stream = self.event_stream(kept=claim is not None)
        await stream.send(self._kept(run, stream, claim, render, head))
        if run.status == "in_progress":
            self.log.debug("response %s: the client left; its generation stopped", run.id)
        self.finish()
        if claim is None or run.status not in _ANSWERED:
            return None  # no key, the client left, or generation failed: nothing to answer again
        return 200, stream.transcript

    async def _kept(
        self,
        run: ResponseRun,
        stream: EventStream,
        claim: Claim | None,
        render: Callable[[ResponseEvent], Sequence[SsePayload]],
        head: Sequence[SsePayload],
    ) -> AsyncIterator[SsePayload]:
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


class ResponsesHandler(_CreatingHandler):
    """``POST /lmsp/v1/responses``: answer now, stream the answer as SSE, or run it in the
    background (11.2)."""

    operations = {
        "post": Operation(
            "createResponse",
            "Create a response, synchronously or as server-sent events",
            "responses",
            {
                "200": events_reply(
                    "With `stream: false` the final response object; with `stream: true` its "
                    "events.",
                    "Response",
                    "Idempotent-Replayed",
                )
            },
            scope="responses:write",
            errors=(*CREATE_ERRORS, 503),
            parameters=("Idempotency-Key",),
            body="ResponseRequest",
        )
    }

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
        task, queued = await self.tasks.submit(request, owner, claim)
        if request.stream:
            await self.send_events(self.tasks.follow(task.id, owner, 0))
        return 200, queued.model_dump_json()

    async def _replay(self, body: str) -> None:
        if self.json_body().get("background") is True:  # the task's events again
            owner = self.principal.owner
            task_id = self.tasks.task_of_response(Response.model_validate_json(body).id, owner)
            await self.event_stream().send(self.tasks.follow(task_id, owner, 0))
        else:
            await super()._replay(body)


class ChatCompletionsHandler(_CreatingHandler):
    """``POST /lmsp/v1/chat/completions``: OpenAI's Chat Completions on the same service (11.3)."""

    operations = {
        "post": Operation(
            "createChatCompletion",
            "OpenAI's Chat Completions on the same service",
            "responses",
            {"200": CHAT_REPLY},
            scope="responses:write",
            errors=CREATE_ERRORS,
            parameters=("Idempotency-Key",),
            body="ChatCompletionRequest",
        )
    }

    async def _respond(self, claim: Claim | None) -> Answer:
        chat = validate_request(ChatCompletionRequest, self.json_body())
        try:
            run = await self.service.start(as_response_request(chat), self.principal.owner)
        except LmspError as error:  # name the field as the chat request calls it
            error.rename_param(functools.partial(chat_param, chat))
            raise
        if not chat.stream:
            return 200, chat_completion(await self.service.complete(run)).model_dump_json()
        include_usage = chat.stream_options is not None and chat.stream_options.include_usage
        translator = ChunkTranslator(run.response(), include_usage=include_usage)
        return await self._stream_answer(run, claim, translator.feed, [translator.first()])


class CompletionsHandler(_CreatingHandler):
    """``POST /lmsp/v1/completions``: OpenAI's Completions on the same service (11.5), each
    before the answers waiting for its model (editors send them as the user types)."""

    operations = {
        "post": Operation(
            "createCompletion",
            "OpenAI's Completions: continue a text, or fill in the middle before a suffix",
            "responses",
            {"200": COMPLETION_REPLY},
            scope="responses:write",
            errors=CREATE_ERRORS,
            parameters=("Idempotency-Key",),
            body="CompletionRequest",
        )
    }

    async def _respond(self, claim: Claim | None) -> Answer:
        completion = validate_request(CompletionRequest, self.json_body())
        try:
            request = completion_as_response_request(completion)
            run = await self.service.start_text(
                request, completion.text, completion.suffix, self.principal.owner, priority=True
            )
        except LmspError as error:  # name the field as the completion request calls it
            error.rename_param(completion_param)
            raise
        if not completion.stream:
            response = await self.service.complete(run)
            return 200, text_completion(response, len(completion.text)).model_dump_json()
        options = completion.stream_options
        chunks = CompletionChunks(
            run.response(),
            include_usage=bool(options and options.include_usage),
            prompt_chars=len(completion.text),
        )
        return await self._stream_answer(run, claim, chunks.feed)


class ResponseHandler(StreamingHandler):
    """``GET /lmsp/v1/responses/{response_id}``: a stored or background response, or the
    events of a background one after ``starting_after`` (11.2)."""

    operations = {
        "get": Operation(
            "getResponse",
            "A stored response, or a background one as it stands (or its events)",
            "responses",
            {
                "200": events_reply(
                    "The response; with `stream=true` the background response's events after "
                    "`starting_after`.",
                    "Response",
                )
            },
            scope="responses:read",
            errors=(404, 410),
            parameters=("stream", "starting_after"),
        )
    }

    async def get(self, response_id: str) -> None:
        owner = self.response_owner(response_id)
        stream = self.get_argument("stream", "false")
        if stream not in ("true", "false"):
            raise LmspError("invalid_request", "stream must be true or false", param="stream")
        if stream == "true":
            after = non_negative_integer(self.get_argument("starting_after", "0"), "starting_after")
            task_id = self.tasks.task_of_response(response_id, owner)
            await self.send_events(self.tasks.follow(task_id, owner, after))
            return
        try:
            response = self.tasks.response(response_id, owner)
        except LmspError as error:
            if error.code != "response_not_found":
                raise
            response = self.service.stored(response_id, owner)
        self.write_model(response)


class ResponseCancelHandler(LmspHandler):
    """``POST /lmsp/v1/responses/{response_id}/cancel``: cancel a background response (11.2)."""

    operations = {
        "post": Operation(
            "cancelResponse",
            "Cancel a background response (a final one is returned unchanged)",
            "responses",
            {"200": json_reply(ref("Response"), "The response as it stands.")},
            scope="tasks:write",
            errors=(404,),
        )
    }

    def post(self, response_id: str) -> None:
        owner = self.response_owner(response_id)
        self.tasks.cancel(self.tasks.task_of_response(response_id, owner), owner)
        self.write_model(self.tasks.response(response_id, owner))
