"""Following a task survives a dropped connection: every event once, in order (LMSP 6.4, 7).

A proxy between the client and the live server cuts the event stream in the middle of an event
(after its ``id`` line, before its data); the client must not give out that half event, must
wait the ``retry:`` the server asked for (2000 ms), and must reconnect with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from lmsp_jupyter.client import (
    AsyncLmspClient,
    LmspClient,
    ResponseEvent,
    ServiceUnreachable,
)
from tests.client.answers import ask, assert_one_final_at_the_end
from tests.conftest import LiveServer
from tests.proxy import LoopbackProxy, Marker

RETRY_SECONDS = 2.0


def via(proxy: LoopbackProxy, live_server: LiveServer) -> str:
    return f"http://127.0.0.1:{proxy.port}{urlsplit(live_server.lmsp).path}"


def cutting_proxy(live_server: LiveServer, suffix: str, drops: int = 1) -> LoopbackProxy:
    port = urlsplit(live_server.lmsp).port
    assert port is not None
    return LoopbackProxy(port, cut_at=Marker(suffix, b"id: 3\n", drops))


def assert_resumed_once_after_event_2(proxy: LoopbackProxy, task_id: str) -> None:
    follows = proxy.requests_to(f"/tasks/{task_id}/events")
    assert [request.headers.get("last-event-id") for request in follows] == [None, "2"]
    assert follows[1].received_at - proxy.cut_times[0] >= RETRY_SECONDS


def test_task_events_resume_after_a_cut_with_every_event_once(live_server: LiveServer) -> None:
    with LmspClient(live_server.lmsp, live_server.token) as direct:
        task = direct.create_task(ask())
        with (
            cutting_proxy(live_server, "/events") as proxy,
            LmspClient(via(proxy, live_server), live_server.token) as client,
        ):
            events = list(client.task_events(task.id))
        assert events == list(direct.task_events(task.id))
    assert_one_final_at_the_end(events)
    assert_resumed_once_after_event_2(proxy, task.id)


def test_async_task_events_resume_after_a_cut_with_every_event_once(
    live_server: LiveServer,
) -> None:
    async def follow(url: str, task_id: str) -> list[ResponseEvent]:
        async with AsyncLmspClient(url, live_server.token) as client:
            return [event async for event in client.task_events(task_id)]

    with LmspClient(live_server.lmsp, live_server.token) as direct:
        task = direct.create_task(ask())
        with cutting_proxy(live_server, "/events") as proxy:
            events = asyncio.run(follow(via(proxy, live_server), task.id))
        assert events == list(direct.task_events(task.id))
    assert_one_final_at_the_end(events)
    assert_resumed_once_after_event_2(proxy, task.id)


def test_following_gives_up_after_its_bounded_reconnections(live_server: LiveServer) -> None:
    with LmspClient(live_server.lmsp, live_server.token) as direct:
        task = direct.create_task(ask())
        list(direct.task_events(task.id))
        with (
            cutting_proxy(live_server, "/events", drops=10) as proxy,
            LmspClient(via(proxy, live_server), live_server.token) as client,
        ):
            client.reconnect_attempts = 1
            received: list[ResponseEvent] = []
            with pytest.raises(ServiceUnreachable, match="gave up after 1 reconnections"):
                received.extend(client.task_events(task.id))
    assert [event.id for event in received] == [1, 2]
    follows = proxy.requests_to(f"/tasks/{task.id}/events")
    assert [request.headers.get("last-event-id") for request in follows] == [None, "2"]


def test_a_cut_response_stream_is_service_unreachable(live_server: LiveServer) -> None:
    with (
        cutting_proxy(live_server, "/responses") as proxy,
        LmspClient(via(proxy, live_server), live_server.token) as client,
    ):
        received: list[ResponseEvent] = []
        with pytest.raises(ServiceUnreachable, match="before the final event"):
            received.extend(client.stream_response(ask()))
    assert [event.event for event in received] == ["response.created", "response.in_progress"]
    assert len(proxy.requests_to("/responses")) == 1
