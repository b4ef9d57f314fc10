"""What the client sends and how it reads replies, with an in-process transport."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest

from lmsp_jupyter.client import (
    AsyncLmspClient,
    LmspClient,
    ProblemError,
    ProtocolViolation,
    ResponseEvent,
    ServiceUnreachable,
)
from lmsp_jupyter.protocol.events import OutputTextDelta, ResponseCompleted, ResponseCreated
from lmsp_jupyter.protocol.responses import Response, Usage
from lmsp_jupyter.server.sse import sse_frame

BASE = "http://lmsp.test/jp/lmsp/v1"
USAGE = Usage(input_tokens=1, output_tokens=1, total_tokens=2)
RESPONSE = Response(id="resp_1", created_at=0, status="in_progress", model="m")
EVENTS = [
    ResponseEvent(1, ResponseCreated(response_id="resp_1", response=RESPONSE)),
    ResponseEvent(
        2,
        OutputTextDelta(
            response_id="resp_1", item_id="msg_1", output_index=0, content_index=0, delta="Hi"
        ),
    ),
    ResponseEvent(3, ResponseCompleted(response_id="resp_1", usage=USAGE, response=RESPONSE)),
]
SSE = {"Content-Type": "text/event-stream; charset=utf-8"}


def stream_of(*events: ResponseEvent, head: bytes = b"retry: 0\n") -> bytes:
    """A stream as the service sends it: ``retry`` in the first event's frame (11.4)."""
    return head + b"".join(sse_frame(event) for event in events) if events else b""


class Recorder:
    """A mock transport answering each request with the next scripted reply."""

    def __init__(self, *replies: Callable[[httpx.Request], httpx.Response]) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.replies.pop(0)(request)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)


def events_reply(body: bytes) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: httpx.Response(200, headers=SSE, content=body)


def json_reply(
    status: int, body: object, media_type: str = "application/json"
) -> Callable[[httpx.Request], httpx.Response]:
    headers = {"Content-Type": media_type}
    return lambda request: httpx.Response(status, headers=headers, content=json.dumps(body))


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


MODELS = {"object": "list", "data": []}


def test_every_request_names_the_version_and_the_bearer_token() -> None:
    recorder = Recorder(json_reply(200, MODELS))
    with LmspClient(BASE, "s3cret", transport=recorder.transport()) as client:
        assert client.models() == []
    (request,) = recorder.requests
    assert str(request.url) == f"{BASE}/models"
    assert request.headers["LMSP-Version"] == "1.0"
    assert request.headers["Authorization"] == "Bearer s3cret"


def test_no_token_sends_no_authorization() -> None:
    recorder = Recorder(json_reply(200, MODELS))
    with LmspClient(BASE, None, transport=recorder.transport()) as client:
        client.models()
    assert "Authorization" not in recorder.requests[0].headers


def test_a_task_request_is_wrapped_and_the_idempotency_key_sent() -> None:
    task = {"id": "task_1", "status": "queued", "created_at": 1, "response_id": "resp_1"}
    recorder = Recorder(json_reply(202, task))
    with LmspClient(BASE, "t", transport=recorder.transport()) as client:
        created = client.create_task({"model": "m", "input": "x"}, idempotency_key="k-1")
    assert created.id == "task_1"
    request = recorder.requests[0]
    assert (request.method, str(request.url)) == ("POST", f"{BASE}/tasks")
    assert request.headers["Idempotency-Key"] == "k-1"
    assert json.loads(request.content) == {
        "type": "response",
        "request": {"model": "m", "input": "x", "stream": False},
    }


def test_an_error_without_a_problem_document_is_a_protocol_violation() -> None:
    recorder = Recorder(json_reply(502, {"oops": 1}, "text/html"))
    with (
        LmspClient(BASE, "t", transport=recorder.transport()) as client,
        pytest.raises(ProtocolViolation, match="HTTP 502 without a problem document"),
    ):
        client.models()


def test_a_problem_document_is_a_problem_error_carrying_it() -> None:
    problem = {"type": "about:blank", "title": "Overloaded", "status": 503, "code": "overloaded"}
    recorder = Recorder(json_reply(503, problem, "application/problem+json"))
    with (
        LmspClient(BASE, "t", transport=recorder.transport()) as client,
        pytest.raises(ProblemError) as caught,
    ):
        client.models()
    assert caught.value.problem.model_dump(exclude_none=True) == problem
    assert str(caught.value) == "503 overloaded"


def test_a_transport_failure_is_service_unreachable() -> None:
    with (
        LmspClient(BASE, "t", transport=httpx.MockTransport(refused)) as client,
        pytest.raises(ServiceUnreachable, match="ConnectError: connection refused"),
    ):
        client.service()


def test_the_first_request_of_task_events_carries_the_after_cursor() -> None:
    recorder = Recorder(events_reply(stream_of(EVENTS[2])))
    with LmspClient(BASE, "t", transport=recorder.transport()) as client:
        assert list(client.task_events("task_1", after=2)) == [EVENTS[2]]
    request = recorder.requests[0]
    assert str(request.url) == f"{BASE}/tasks/task_1/events?after=2"
    assert request.headers["Accept"] == "text/event-stream"
    assert "Last-Event-ID" not in request.headers


def test_a_stream_ending_early_is_resumed_from_the_last_event_id() -> None:
    recorder = Recorder(
        events_reply(stream_of(EVENTS[0])),
        events_reply(stream_of(*EVENTS)),  # a replay of event 1 is not given out twice
    )
    with LmspClient(BASE, "t", transport=recorder.transport()) as client:
        assert list(client.task_events("task_1")) == EVENTS
    assert [r.headers.get("Last-Event-ID") for r in recorder.requests] == [None, "1"]


def test_a_transport_failure_mid_follow_is_resumed() -> None:
    recorder = Recorder(
        events_reply(stream_of(*EVENTS[:2])), refused, events_reply(stream_of(EVENTS[2]))
    )
    with LmspClient(BASE, "t", transport=recorder.transport()) as client:
        assert list(client.task_events("task_1")) == EVENTS
    assert [r.headers.get("Last-Event-ID") for r in recorder.requests] == [None, "2", "2"]


def test_reconnections_without_progress_are_bounded() -> None:
    recorder = Recorder(events_reply(stream_of(EVENTS[0])), *[events_reply(stream_of())] * 2)
    with LmspClient(BASE, "t", transport=recorder.transport()) as client:
        client.reconnect_attempts = 2
        received: list[ResponseEvent] = []
        with pytest.raises(ServiceUnreachable, match="gave up after 2 reconnections in a row"):
            received.extend(client.task_events("task_1"))
    assert received == [EVENTS[0]]
    assert len(recorder.requests) == 3


def test_a_response_stream_cut_short_is_service_unreachable() -> None:
    recorder = Recorder(events_reply(stream_of(*EVENTS[:2])))
    with LmspClient(BASE, "t", transport=recorder.transport()) as client:
        received: list[ResponseEvent] = []
        with pytest.raises(ServiceUnreachable, match="before the final event"):
            received.extend(client.stream_response({"model": "m", "input": "x"}))
    assert received == EVENTS[:2]
    assert json.loads(recorder.requests[0].content)["stream"] is True


def test_unknown_event_names_are_skipped() -> None:
    future = b'id: 2\nevent: response.future_thing\ndata: {"x": 1}\n\n'
    body = stream_of(EVENTS[0]) + future + sse_frame(EVENTS[1]).replace(b"id: 2", b"id: 3")
    recorder = Recorder(events_reply(body + sse_frame(EVENTS[2]).replace(b"id: 3", b"id: 4")))
    with LmspClient(BASE, "t", transport=recorder.transport()) as client:
        received = list(client.task_events("task_1"))
    assert [(event.id, event.event) for event in received] == [
        (1, "response.created"),
        (3, "response.output_text.delta"),
        (4, "response.completed"),
    ]


def test_an_event_without_an_integer_id_is_a_protocol_violation() -> None:
    recorder = Recorder(events_reply(b'event: response.created\ndata: {"response_id": "r"}\n\n'))
    with (
        LmspClient(BASE, "t", transport=recorder.transport()) as client,
        pytest.raises(ProtocolViolation, match="has no integer id"),
    ):
        list(client.task_events("task_1"))


def test_the_async_client_resumes_the_same_way() -> None:
    recorder = Recorder(
        events_reply(stream_of(*EVENTS[:2])), refused, events_reply(stream_of(EVENTS[2]))
    )

    async def follow() -> list[ResponseEvent]:
        async with AsyncLmspClient(BASE, "t", transport=recorder.transport()) as client:
            return [event async for event in client.task_events("task_1")]

    assert asyncio.run(follow()) == EVENTS
    assert [r.headers.get("Last-Event-ID") for r in recorder.requests] == [None, "2", "2"]
    assert recorder.requests[0].headers["LMSP-Version"] == "1.0"
