"""``LmspClient`` and ``AsyncLmspClient``: one API, blocking and async; they only do the I/O."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Generic, Literal, Self, TypeVar, overload

import httpx

from ..protocol.completions import TextCompletion
from ..protocol.events import ResponseEvent
from ..protocol.models import Model, ServiceDocument
from ..protocol.responses import Response
from ..protocol.tasks import Task, TaskRequest
from . import _wire
from ._discovery import discover
from ._errors import ProtocolViolation
from ._follow import RECONNECT_ATTEMPTS, EventFollower, follow_response, follow_task
from ._wire import Call, RequestLike

T = TypeVar("T")


def _location(base_url: str | None, token: str | None) -> tuple[str, str | None]:
    if base_url is None:
        found = discover()
        return found.base_url, token if token is not None else found.token
    return base_url.rstrip("/"), token


#: The transport a client takes (``transport=``) and the httpx client it opens with it.
TransportT = TypeVar("TransportT", httpx.BaseTransport, httpx.AsyncBaseTransport)
HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)


class _BaseClient(Generic[TransportT, HttpT]):
    """What both clients share: where the service is, with which token, and how they open."""

    #: Reconnections in a row without a new event before :meth:`task_events` gives up.
    reconnect_attempts = RECONNECT_ATTEMPTS
    #: The httpx client class: blocking or async.
    _http_class: Callable[..., HttpT]

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 60.0,
        transport: TransportT | None = None,
    ) -> None:
        self._base_url, token = _location(base_url, token)
        self._http: HttpT = self._http_class(
            base_url=self._base_url,
            headers=_wire.default_headers(token),
            timeout=timeout,
            transport=transport,
        )

    @property
    def base_url(self) -> str:
        """The LMSP root, e.g. ``http://127.0.0.1:8888/lmsp/v1``."""
        return self._base_url


class LmspClient(_BaseClient[httpx.BaseTransport, httpx.Client]):
    """A blocking client of an LMSP 1.0 service.

    With no ``base_url`` it finds the service itself (:func:`discover`). Every method raises
    :class:`ProblemError` for a problem document and :class:`ServiceUnreachable` when the
    service cannot be reached; only :meth:`task_events` reconnects by itself.
    """

    _http_class = httpx.Client

    def service(self) -> ServiceDocument:
        """The service document: version, capabilities and scopes."""
        return self._call(_wire.service())

    def models(self) -> list[Model]:
        """Every model the service can run."""
        return self._call(_wire.models())

    def embed(self, texts: Sequence[str], *, model: str) -> list[list[float]]:
        """The normalized vector of each text, in order, by a model with the ``embedding``
        capability."""
        return self._call(_wire.embed(model, texts))

    def create_response(self, request: RequestLike, *, mcp: Sequence[str] = ()) -> Response:
        """Generate a response and return it when it is done.

        ``mcp``: labels of MCP servers the service runs, whose tools the model is offered
        (one ``mcp`` tool each); a call ends the response with an ``mcp_approval_request``,
        answered with :meth:`answer_approvals`.
        """
        return self._call(_wire.create_response(request, mcp))

    def stream_response(
        self, request: RequestLike, *, mcp: Sequence[str] = ()
    ) -> Iterator[ResponseEvent]:
        """Generate a response and yield its events as they come, up to the final one."""
        return self._follow(follow_response(request, mcp))

    def answer_approvals(
        self,
        response: Response,
        approve: bool | Mapping[str, bool] = True,
        *,
        reason: str | None = None,
    ) -> Response:
        """Answer the MCP approval requests ``response`` ended with (approve every one, deny
        every one, or a decision per request id) and return the response that continues it:
        the approved calls run on their servers, the model is told of the denied ones.
        :func:`approval_request` is the request itself, for :meth:`create_task` or streaming.
        """
        return self.create_response(_wire.approval_request(response, approve, reason=reason))

    def get_response(self, response_id: str) -> Response:
        """A response stored with ``store: true``."""
        return self._call(_wire.get_response(response_id))

    @overload
    def complete(
        self,
        prompt: str,
        *,
        suffix: str | None = ...,
        model: str | None = ...,
        stream: Literal[False] = ...,
        **options: Any,
    ) -> TextCompletion: ...

    @overload
    def complete(
        self,
        prompt: str,
        *,
        suffix: str | None = ...,
        model: str | None = ...,
        stream: Literal[True],
        **options: Any,
    ) -> Iterator[TextCompletion]: ...

    def complete(
        self,
        prompt: str,
        *,
        suffix: str | None = None,
        model: str | None = None,
        stream: bool = False,
        **options: Any,
    ) -> TextCompletion | Iterator[TextCompletion]:
        """Continue ``prompt`` (OpenAI's Completions), or fill in the gap before ``suffix``
        where the model can; the ``text_completion``, or with ``stream`` its chunks as they
        come. ``options`` are the request's other fields (``max_tokens``, ``temperature``,
        ``stop``, ...). Without a ``model``, one that fills in the middle is preferred."""
        model = model or _wire.completion_model(self.models())
        body = _wire.completion_body(prompt, suffix, model, options)
        if not stream:
            return self._call(_wire.create_completion(body))
        return self._chunks(_wire.stream_completion(body))

    def create_task(
        self,
        request: TaskRequest | RequestLike,
        *,
        idempotency_key: str | None = None,
        mcp: Sequence[str] = (),
    ) -> Task:
        """Start a response request as a background task (``mcp``: as
        :meth:`create_response`; the task ends waiting for the approvals, answered by a new
        task of :func:`approval_request`)."""
        return self._call(_wire.create_task(request, idempotency_key, mcp))

    def get_task(self, task_id: str) -> Task:
        """A task and, once it is final, its result."""
        return self._call(_wire.get_task(task_id))

    def list_tasks(self) -> list[Task]:
        """The caller's tasks, newest first (the service's default page)."""
        return self._call(_wire.list_tasks())

    def cancel_task(self, task_id: str) -> Task:
        """Cancel a task; a final task stays as it is."""
        return self._call(_wire.cancel_task(task_id))

    def task_events(self, task_id: str, *, after: int | None = None) -> Iterator[ResponseEvent]:
        """A task's events after the id ``after``, replayed then live, up to the final one.

        A dropped connection is resumed with ``Last-Event-ID``: each event comes exactly once.
        """
        return self._follow(follow_task(task_id, after, attempts=self.reconnect_attempts))

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, call: Call[T]) -> T:
        with _wire.reaching(self._base_url):
            reply = self._http.request(
                call.method, call.path, json=call.body, headers=call.headers, params=call.params
            )
        return _wire.read_reply(reply, call.read)

    def _chunks(self, call: Call[None]) -> Iterator[TextCompletion]:
        with (
            _wire.reaching(self._base_url),
            self._http.stream(call.method, call.path, json=call.body) as reply,
        ):
            if reply.is_error:
                reply.read()
                raise _wire.problem_error(reply)
            reader = _wire.CompletionReader()
            for data in reply.iter_bytes():
                yield from reader.feed(data)
                if reader.done:
                    return
        raise ProtocolViolation("the completion stream ended before [DONE]")

    def _follow(self, follower: EventFollower) -> Iterator[ResponseEvent]:
        while True:
            call = follower.next_request()
            try:
                with self._http.stream(
                    call.method, call.path, json=call.body, headers=call.headers, params=call.params
                ) as reply:
                    if reply.is_error:
                        reply.read()
                    follower.opened(reply)
                    for chunk in reply.iter_bytes():
                        yield from follower.feed(chunk)
                        if follower.finished:
                            return
                delay = follower.dropped(self._base_url, None)
            except httpx.TransportError as error:
                delay = follower.dropped(self._base_url, error)
            time.sleep(delay)


class AsyncLmspClient(_BaseClient[httpx.AsyncBaseTransport, httpx.AsyncClient]):
    """An asyncio client of an LMSP 1.0 service: :class:`LmspClient` with ``async`` methods."""

    _http_class = httpx.AsyncClient

    async def service(self) -> ServiceDocument:
        """The service document: version, capabilities and scopes."""
        return await self._call(_wire.service())

    async def models(self) -> list[Model]:
        """Every model the service can run."""
        return await self._call(_wire.models())

    async def embed(self, texts: Sequence[str], *, model: str) -> list[list[float]]:
        """The normalized vector of each text, in order, by a model with the ``embedding``
        capability."""
        return await self._call(_wire.embed(model, texts))

    async def create_response(self, request: RequestLike, *, mcp: Sequence[str] = ()) -> Response:
        """Generate a response and return it when it is done (``mcp``: as
        :meth:`LmspClient.create_response`)."""
        return await self._call(_wire.create_response(request, mcp))

    def stream_response(
        self, request: RequestLike, *, mcp: Sequence[str] = ()
    ) -> AsyncIterator[ResponseEvent]:
        """Generate a response and yield its events as they come, up to the final one."""
        return self._follow(follow_response(request, mcp))

    async def answer_approvals(
        self,
        response: Response,
        approve: bool | Mapping[str, bool] = True,
        *,
        reason: str | None = None,
    ) -> Response:
        """:meth:`LmspClient.answer_approvals`: the response that continues ``response``."""
        request = _wire.approval_request(response, approve, reason=reason)
        return await self.create_response(request)

    async def get_response(self, response_id: str) -> Response:
        """A response stored with ``store: true``."""
        return await self._call(_wire.get_response(response_id))

    @overload
    async def complete(
        self,
        prompt: str,
        *,
        suffix: str | None = ...,
        model: str | None = ...,
        stream: Literal[False] = ...,
        **options: Any,
    ) -> TextCompletion: ...

    @overload
    async def complete(
        self,
        prompt: str,
        *,
        suffix: str | None = ...,
        model: str | None = ...,
        stream: Literal[True],
        **options: Any,
    ) -> AsyncIterator[TextCompletion]: ...

    async def complete(
        self,
        prompt: str,
        *,
        suffix: str | None = None,
        model: str | None = None,
        stream: bool = False,
        **options: Any,
    ) -> TextCompletion | AsyncIterator[TextCompletion]:
        """:meth:`LmspClient.complete`: ``await client.complete(...)``, or with ``stream``
        ``async for chunk in await client.complete(..., stream=True)``."""
        model = model or _wire.completion_model(await self.models())
        body = _wire.completion_body(prompt, suffix, model, options)
        if not stream:
            return await self._call(_wire.create_completion(body))
        return self._chunks(_wire.stream_completion(body))

    async def create_task(
        self,
        request: TaskRequest | RequestLike,
        *,
        idempotency_key: str | None = None,
        mcp: Sequence[str] = (),
    ) -> Task:
        """Start a response request as a background task (``mcp``: as
        :meth:`LmspClient.create_task`)."""
        return await self._call(_wire.create_task(request, idempotency_key, mcp))

    async def get_task(self, task_id: str) -> Task:
        """A task and, once it is final, its result."""
        return await self._call(_wire.get_task(task_id))

    async def list_tasks(self) -> list[Task]:
        """The caller's tasks, newest first (the service's default page)."""
        return await self._call(_wire.list_tasks())

    async def cancel_task(self, task_id: str) -> Task:
        """Cancel a task; a final task stays as it is."""
        return await self._call(_wire.cancel_task(task_id))

    def task_events(
        self, task_id: str, *, after: int | None = None
    ) -> AsyncIterator[ResponseEvent]:
        """A task's events after the id ``after``, replayed then live, up to the final one.

        A dropped connection is resumed with ``Last-Event-ID``: each event comes exactly once.
        """
        return self._follow(follow_task(task_id, after, attempts=self.reconnect_attempts))

    async def close(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(self, call: Call[T]) -> T:
        with _wire.reaching(self._base_url):
            reply = await self._http.request(
                call.method, call.path, json=call.body, headers=call.headers, params=call.params
            )
        return _wire.read_reply(reply, call.read)

    async def _chunks(self, call: Call[None]) -> AsyncIterator[TextCompletion]:
        with _wire.reaching(self._base_url):
            async with self._http.stream(call.method, call.path, json=call.body) as reply:
                if reply.is_error:
                    await reply.aread()
                    raise _wire.problem_error(reply)
                reader = _wire.CompletionReader()
                async for data in reply.aiter_bytes():
                    for chunk in reader.feed(data):
                        yield chunk
                    if reader.done:
                        return
        raise ProtocolViolation("the completion stream ended before [DONE]")

    async def _follow(self, follower: EventFollower) -> AsyncIterator[ResponseEvent]:
        while True:
            call = follower.next_request()
            try:
                async with self._http.stream(
                    call.method, call.path, json=call.body, headers=call.headers, params=call.params
                ) as reply:
                    if reply.is_error:
                        await reply.aread()
                    follower.opened(reply)
                    async for chunk in reply.aiter_bytes():
                        for event in follower.feed(chunk):
                            yield event
                        if follower.finished:
                            return
                delay = follower.dropped(self._base_url, None)
            except httpx.TransportError as error:
                delay = follower.dropped(self._base_url, error)
            await asyncio.sleep(delay)
