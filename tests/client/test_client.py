"""``LmspClient`` and ``AsyncLmspClient`` against a live Jupyter server with the extension."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Sequence

import httpx
import pytest

from lmsp_jupyter.client import (
    AsyncLmspClient,
    LmspClient,
    ProblemError,
    ResponseEvent,
    ServiceUnreachable,
)
from lmsp_jupyter.protocol.events import ResponseCancelled
from lmsp_jupyter.protocol.requests import ResponseRequest
from lmsp_jupyter.protocol.responses import Response
from tests.client.answers import ask, assert_one_final_at_the_end, deltas, text_of
from tests.conftest import MODEL, LiveServer, free_port

CAPABILITIES = ["streaming", "tasks", "conversations", "tools", "structured_output", "reasoning"]


@pytest.fixture
def lmsp(live_server: LiveServer) -> Iterator[LmspClient]:
    with LmspClient(live_server.lmsp, live_server.token) as client:
        yield client


@pytest.fixture
def direct(live_server: LiveServer) -> Iterator[httpx.Client]:
    """Plain HTTP to the same server: what the client's answers are compared with."""
    with live_server.client() as http:
        yield http


# --- the blocking client --------------------------------------------------------------------


def test_base_url_is_the_lmsp_root_without_a_trailing_slash(live_server: LiveServer) -> None:
    with LmspClient(live_server.lmsp + "/", live_server.token) as client:
        assert client.base_url == live_server.lmsp


def test_service_document(lmsp: LmspClient) -> None:
    document = lmsp.service()
    assert (document.object, document.lmsp_version) == ("service", "1.0")
    assert document.service.name == "lmsp-jupyter"
    assert document.capabilities == CAPABILITIES


def test_models_are_the_bundled_model(lmsp: LmspClient) -> None:
    models = lmsp.models()
    assert [model.id for model in models] == [MODEL]
    assert (models[0].context_length, models[0].size_bytes) == (8192, 253_113_024)


def test_create_response_is_the_services_response(lmsp: LmspClient, direct: httpx.Client) -> None:
    response = lmsp.create_response(ask())
    expected = Response.model_validate(direct.post("/responses", json=ask()).json())
    assert response.model == MODEL
    assert response.status == expected.status == "incomplete"
    assert response.incomplete_details == expected.incomplete_details
    assert response.usage is not None and expected.usage is not None
    # The same prompt twice: the second reads it from the first one's cache.
    assert response.usage.model_dump(exclude={"input_tokens_details"}) == (
        expected.usage.model_dump(exclude={"input_tokens_details"})
    )
    cached = expected.usage.input_tokens_details.cached_tokens
    assert cached == response.usage.input_tokens - 1
    assert response.usage.output_tokens == 8
    assert text_of(response) == text_of(expected) != ""


def test_a_response_request_model_gives_the_same_answer_as_a_dict(lmsp: LmspClient) -> None:
    from_model = lmsp.create_response(ResponseRequest.model_validate(ask()))
    assert text_of(from_model) == text_of(lmsp.create_response(ask()))


def test_stream_response_starts_with_created_and_ends_with_one_final(lmsp: LmspClient) -> None:
    events = list(lmsp.stream_response(ask()))
    assert_one_final_at_the_end(events)
    assert events[-1].event == "response.incomplete"
    assert deltas(events) == text_of(lmsp.create_response(ask()))


def test_get_response_returns_the_stored_response(lmsp: LmspClient) -> None:
    stored = lmsp.create_response(ask(store=True))
    assert lmsp.get_response(stored.id) == stored


def test_task_create_get_list_and_events(lmsp: LmspClient) -> None:
    task = lmsp.create_task(ask())
    assert (task.object, task.type) == ("task", "response")
    assert task.status in ("queued", "in_progress")
    events = list(lmsp.task_events(task.id))
    assert_one_final_at_the_end(events)
    done = lmsp.get_task(task.id)
    assert (done.id, done.status, done.last_event_id) == (task.id, "incomplete", events[-1].id)
    assert done.result is not None and text_of(done.result) == deltas(events)
    assert lmsp.list_tasks()[0] == done
    assert list(lmsp.task_events(task.id, after=2)) == events[2:]


def test_create_task_with_an_idempotency_key_makes_one_task(lmsp: LmspClient) -> None:
    key = str(uuid.uuid4())
    first = lmsp.create_task(ask(), idempotency_key=key)
    again = lmsp.create_task(ask(), idempotency_key=key)
    assert again.id == first.id
    list(lmsp.task_events(first.id))


def test_cancel_a_running_task_ends_it_with_response_cancelled(lmsp: LmspClient) -> None:
    task = lmsp.create_task(ask("Write a long story about a cat.", max_output_tokens=256))
    events = []
    for event in lmsp.task_events(task.id):
        events.append(event)
        if event.id == 3:
            assert lmsp.cancel_task(task.id).id == task.id
    assert isinstance(events[-1].data, ResponseCancelled)
    assert sum(event.is_final for event in events) == 1
    assert lmsp.get_task(task.id).status == "cancelled"


def test_unknown_model_is_a_problem_error_model_not_found(lmsp: LmspClient) -> None:
    with pytest.raises(ProblemError) as caught:
        lmsp.create_response(ask(model="nope"))
    assert (caught.value.status, caught.value.code) == (404, "model_not_found")
    assert caught.value.problem.title == "Model not found"
    assert caught.value.problem.param == "model"


def test_a_stream_refused_before_it_starts_is_a_problem_error(lmsp: LmspClient) -> None:
    with pytest.raises(ProblemError) as caught:
        list(lmsp.stream_response(ask(model="nope")))
    assert (caught.value.status, caught.value.code) == (404, "model_not_found")


def test_an_invalid_request_names_its_parameter(lmsp: LmspClient) -> None:
    with pytest.raises(ProblemError) as caught:
        lmsp.create_response(ask(temperature=5))
    assert (caught.value.status, caught.value.code) == (400, "invalid_request")
    assert caught.value.problem.param == "temperature"


@pytest.mark.parametrize("call", ["get_task", "cancel_task", "task_events"])
def test_unknown_task_is_task_not_found(lmsp: LmspClient, call: str) -> None:
    with pytest.raises(ProblemError) as caught:
        list(getattr(lmsp, call)("task_nope"))
    assert (caught.value.status, caught.value.code) == (404, "task_not_found")


def test_a_wrong_token_is_unauthorized(live_server: LiveServer) -> None:
    with LmspClient(live_server.lmsp, "wrong") as client, pytest.raises(ProblemError) as caught:
        client.models()
    assert (caught.value.status, caught.value.code) == (401, "unauthorized")


def test_nothing_listening_is_service_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}/lmsp/v1"
    with LmspClient(url, "x") as client, pytest.raises(ServiceUnreachable, match=url):
        client.models()


# --- the async client -----------------------------------------------------------------------


def async_client(live_server: LiveServer) -> AsyncLmspClient:
    return AsyncLmspClient(live_server.lmsp, live_server.token)


def test_async_service_and_models(live_server: LiveServer) -> None:
    async def scenario() -> tuple[Sequence[str], list[str]]:
        async with async_client(live_server) as client:
            return (await client.service()).capabilities, [m.id for m in await client.models()]

    assert asyncio.run(scenario()) == (CAPABILITIES, [MODEL])


def test_async_create_and_stream_give_the_sync_answer(
    live_server: LiveServer, lmsp: LmspClient
) -> None:
    async def scenario() -> tuple[Response, list[ResponseEvent]]:
        async with async_client(live_server) as client:
            response = await client.create_response(ask())
            return response, [event async for event in client.stream_response(ask())]

    response, events = asyncio.run(scenario())
    expected = text_of(lmsp.create_response(ask()))
    assert text_of(response) == expected
    assert_one_final_at_the_end(events)
    assert deltas(events) == expected


def test_async_tasks_create_get_list_cancel_and_events(live_server: LiveServer) -> None:
    async def scenario() -> None:
        async with async_client(live_server) as client:
            task = await client.create_task(ask())
            events = [event async for event in client.task_events(task.id)]
            assert_one_final_at_the_end(events)
            done = await client.get_task(task.id)
            assert (done.status, done.last_event_id) == ("incomplete", events[-1].id)
            assert (await client.list_tasks())[0] == done
            assert await client.cancel_task(task.id) == done  # a final task stays as it is
            assert [event async for event in client.task_events(task.id, after=2)] == events[2:]

    asyncio.run(scenario())


def test_async_errors_are_problem_errors(live_server: LiveServer) -> None:
    async def scenario() -> list[tuple[int, str]]:
        codes = []
        async with async_client(live_server) as client:
            for call in (
                client.create_response(ask(model="nope")),
                client.get_task("task_nope"),
                anext(client.task_events("task_nope")),
                anext(client.stream_response(ask(model="nope"))),
            ):
                try:
                    await call
                except ProblemError as error:
                    codes.append((error.status, error.code))
        return codes

    assert asyncio.run(scenario()) == [
        (404, "model_not_found"),
        (404, "task_not_found"),
        (404, "task_not_found"),
        (404, "model_not_found"),
    ]


def test_async_nothing_listening_is_service_unreachable() -> None:
    async def scenario() -> None:
        async with AsyncLmspClient(f"http://127.0.0.1:{free_port()}/lmsp/v1", "x") as client:
            await client.models()

    with pytest.raises(ServiceUnreachable):
        asyncio.run(scenario())
