"""LMSP in front of a real third-party OpenAI-compatible server (issue: remote engines).

Each test runs against llama-cpp-python's own server and, when ``LMSP_LLAMA_SERVER`` names a
binary, against llama.cpp's ``llama-server``; both serve the bundled GGUF as ``gemma``. The Jupyter
server reaches the remote through a proxy that records every upstream request and who closed
it, configured as ``EngineRouter.remote_servers = [{"name": "remote", "url": ...}]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import jsonschema
import pytest

from lmsp_jupyter.client import LmspClient
from lmsp_jupyter.engine.catalog import DEFAULT_CONTEXT_LENGTH
from tests.conftest import MODEL, LiveServer, running_server
from tests.helpers import eventually, message_events, message_text
from tests.proxy import LoopbackProxy, Marker, Request
from tests.server.helpers import Event, assert_problem, parse_sse
from tests.server.remote_engines import ALIAS, CONTEXT, KINDS, OpenAIServer, require

REMOTE_MODEL = f"remote/{ALIAS}"
PROMPT = "Name a colour."
FINAL = {"response.completed", "response.incomplete", "response.failed", "response.cancelled"}
COLOUR = {
    "type": "object",
    "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]}},
    "required": ["colour"],
    "additionalProperties": False,
}
WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module", params=KINDS)
def remote(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    bundled_model_path: Path,
) -> Iterator[OpenAIServer]:
    """The third-party server, started once per kind."""
    kind: str = request.param
    require(kind)
    server = OpenAIServer(kind, bundled_model_path, tmp_path_factory.mktemp(kind) / "remote.log")
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def upstream(remote: OpenAIServer) -> Iterator[LoopbackProxy]:
    """A proxy in front of the remote that cuts nothing and records every request."""
    with LoopbackProxy(remote.port) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def live_server(
    remote: OpenAIServer, upstream: LoopbackProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """A Jupyter server with the extension, offering the remote's models through the proxy (in
    place of conftest's, so that its ``client`` fixture talks to this one)."""
    servers = [{"name": "remote", "url": f"http://127.0.0.1:{upstream.port}/v1"}]
    config = {"EngineRouter": {"remote_servers": servers}}
    with running_server(tmp_path_factory.mktemp("lmsp"), config=config) as server:
        yield server


def ask(**fields: Any) -> dict[str, Any]:
    return {
        "model": REMOTE_MODEL,
        "input": PROMPT,
        "temperature": 0,
        "max_output_tokens": 8,
        **fields,
    }


def stream(client: httpx.Client, body: dict[str, Any]) -> list[Event]:
    with client.stream("POST", "/responses", json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        events, _ = parse_sse(response.iter_lines())
    return events


def chat_requests(proxy: LoopbackProxy) -> list[Request]:
    return proxy.requests_to("/chat/completions")


def model_status(client: httpx.Client, model_id: str) -> str:
    models = {model["id"]: model for model in client.get("/models").json()["data"]}
    status: str = models[model_id]["status"]
    return status


# --- listing ------------------------------------------------------------------------------------


def test_remote_models_are_listed_as_name_slash_id_owned_by_the_server(
    client: httpx.Client, remote: OpenAIServer
) -> None:
    response = client.get("/models")
    assert response.status_code == 200
    models = {model["id"]: model for model in response.json()["data"]}
    model = models[REMOTE_MODEL]
    assert model["owned_by"] == "remote"
    assert model["status"] == "available"
    assert model["capabilities"] == ["streaming", "tools", "structured_output", "conversations"]
    assert model["format"] is None
    assert model["size_bytes"] is None
    if remote.kind == "llama-cpp-python":  # it reports no window: the default
        assert model["context_length"] == DEFAULT_CONTEXT_LENGTH
    assert models[MODEL]["owned_by"] == "local"
    assert client.get(f"/models/{REMOTE_MODEL}").json() == model


# --- answers ------------------------------------------------------------------------------------


def test_a_sync_answer_is_the_remote_servers_own_answer(
    client: httpx.Client, remote: OpenAIServer
) -> None:
    direct = remote.chat(
        {
            "model": ALIAS,
            "messages": [{"role": "user", "content": PROMPT}],
            "temperature": 0,
            "max_tokens": 8,
        }
    )
    response = client.post("/responses", json=ask())
    assert response.status_code == 200, response.text
    answer = response.json()
    choice = direct["choices"][0]
    assert answer["model"] == REMOTE_MODEL
    assert message_text(answer) == choice["message"]["content"]
    cut = choice["finish_reason"] == "length"
    assert answer["status"] == ("incomplete" if cut else "completed")
    assert answer["usage"]["output_tokens"] == direct["usage"]["completion_tokens"]
    assert answer["usage"]["input_tokens"] == direct["usage"]["prompt_tokens"] > 0


def test_a_streamed_answer_has_the_events_of_a_local_one(client: httpx.Client) -> None:
    events = stream(client, ask())
    assert [event.id for event in events] == list(range(1, len(events) + 1))
    names = [event.event for event in events]
    assert names[-1] in ("response.completed", "response.incomplete")
    assert names == message_events(len(names) - 8, names[-1])
    text = "".join(event.data["delta"] for event in events if event.event.endswith(".delta"))
    assert events[-2].data["item"]["content"][0]["text"] == text
    sync = client.post("/responses", json=ask()).json()
    assert message_text(sync) == text
    assert events[-1].data["usage"]["input_tokens"] == sync["usage"]["input_tokens"] > 0


def test_a_conversation_continues_on_the_remote(client: httpx.Client) -> None:
    first = client.post("/responses", json=ask(store=True)).json()
    second = client.post("/responses", json=ask(previous_response_id=first["id"], input="And?"))
    assert second.status_code == 200, second.text
    assert second.json()["status"] in ("completed", "incomplete")


def test_a_structured_answer_validates_against_its_schema(client: httpx.Client) -> None:
    schema_format = {"type": "json_schema", "json_schema": {"name": "c", "schema": COLOUR}}
    response = client.post(
        "/responses",
        json=ask(input="Pick a colour.", max_output_tokens=64, response_format=schema_format),
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["status"] == "completed", answer
    jsonschema.validate(json.loads(message_text(answer)), COLOUR)


def test_a_forced_tool_call_is_a_function_call_item_with_valid_arguments(
    client: httpx.Client, remote: OpenAIServer
) -> None:
    if remote.kind == "llama-server":
        pytest.skip(
            "llama-server does not enforce a named tool_choice with the bundled base model's "
            "template: it answers text, which LMSP does not pass off as a call"
        )
    body = ask(
        input="What is the weather in Paris?",
        max_output_tokens=64,
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    events = stream(client, body)
    assert events[-1].event == "response.completed", events[-1].data.get("error")
    calls = [
        event.data["item"]
        for event in events
        if event.event == "response.output_item.done"
        and event.data["item"]["type"] == "function_call"
    ]
    assert len(calls) == 1
    call = calls[0]
    assert call["name"] == "get_weather"
    assert call["call_id"].startswith("call_")
    deltas = "".join(
        event.data["delta"]
        for event in events
        if event.event == "response.function_call_arguments.delta"
    )
    assert deltas == call["arguments"]
    jsonschema.validate(json.loads(call["arguments"]), WEATHER["parameters"])


def test_a_prompt_over_the_remote_window_is_refused_before_it_is_sent(
    client: httpx.Client, upstream: LoopbackProxy
) -> None:
    before = len(chat_requests(upstream))
    response = client.post("/responses", json=ask(input="colour " * CONTEXT))
    assert_problem(response, 400, "context_length_exceeded")
    assert response.json()["param"] == "max_output_tokens"
    task = client.post(
        "/tasks", json={"type": "response", "request": ask(input="colour " * CONTEXT)}
    )
    assert_problem(task, 400, "context_length_exceeded")
    assert chat_requests(upstream)[before:] == []


def test_a_prompt_longer_in_bytes_than_the_window_but_not_in_tokens_is_answered(
    client: httpx.Client, remote: OpenAIServer
) -> None:
    prompt = "red " * (CONTEXT // 4)
    direct = remote.chat(
        {"model": ALIAS, "messages": [{"role": "user", "content": prompt}], "max_tokens": 1}
    )
    response = client.post("/responses", json=ask(input=prompt))
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["input_tokens"] == direct["usage"]["prompt_tokens"]
    assert len(prompt.encode()) + 8 > CONTEXT > direct["usage"]["prompt_tokens"] + 8


# --- tasks ----------------------------------------------------------------------------------------


def test_a_task_is_followed_and_resumed_after_a_cut(live_server: LiveServer) -> None:
    port = urlsplit(live_server.lmsp).port
    assert port is not None
    with LmspClient(live_server.lmsp, live_server.token) as direct:
        task = direct.create_task(ask(max_output_tokens=16))
        with (
            LoopbackProxy(port, cut_at=Marker("/events", b"id: 3\n")) as cutting,
            LmspClient(
                f"http://127.0.0.1:{cutting.port}{urlsplit(live_server.lmsp).path}",
                live_server.token,
            ) as client,
        ):
            events = list(client.task_events(task.id))
        assert events == list(direct.task_events(task.id))
        assert direct.get_task(task.id).status in ("completed", "incomplete")
    follows = cutting.requests_to(f"/tasks/{task.id}/events")
    assert [request.headers.get("last-event-id") for request in follows] == [None, "2"]
    assert [event.id for event in events] == list(range(1, len(events) + 1))
    assert events[-1].is_final


def test_cancelling_a_task_closes_the_upstream_request(
    client: httpx.Client, upstream: LoopbackProxy
) -> None:
    before = len(chat_requests(upstream))
    task = client.post(
        "/tasks", json={"type": "response", "request": ask(max_output_tokens=1500)}
    ).json()
    eventually(  # a few deltas have come: the remote is generating
        lambda: client.get(f"/tasks/{task['id']}").json()["last_event_id"] >= 5,
        what="five events of the task",
    )
    assert client.post(f"/tasks/{task['id']}/cancel").status_code == 200
    with client.stream("GET", f"/tasks/{task['id']}/events") as response:
        events, _ = parse_sse(response.iter_lines())
    assert events[-1].event == "response.cancelled"
    (upstream_request,) = chat_requests(upstream)[before:]
    eventually(lambda: upstream_request.closed_by_client, what="the upstream request closed")
    assert b"[DONE]" not in upstream_request.response
    assert upstream_request.response.count(b'"content"') < 1500


def test_a_client_leaving_a_stream_closes_the_upstream_request(
    live_server: LiveServer, upstream: LoopbackProxy
) -> None:
    before = len(chat_requests(upstream))
    with (
        live_server.client() as client,
        client.stream("POST", "/responses", json=ask(max_output_tokens=1500, stream=True)) as r,
    ):
        for line in r.iter_lines():
            if "output_text.delta" in line:
                break
    (upstream_request,) = chat_requests(upstream)[before:]
    eventually(lambda: upstream_request.closed_by_client, what="the upstream request closed")
    assert b"[DONE]" not in upstream_request.response


# --- failure ------------------------------------------------------------------------------------


def test_a_remote_lost_mid_answer_fails_the_answer_then_503_then_recovers(
    client: httpx.Client, remote: OpenAIServer
) -> None:
    body = {**ask(max_output_tokens=1500), "stream": True}
    with client.stream("POST", "/responses", json=body) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        seen: list[str] = []
        for line in lines:
            seen.append(line)
            if "output_text.delta" in line:
                remote.kill()
                break
        events, _ = parse_sse([*seen, *lines])
    assert events[-1].event == "response.failed"
    assert events[-1].data["error"]["code"] == "generation_failed"
    assert [event.event for event in events].count("response.failed") == 1

    assert model_status(client, REMOTE_MODEL) == "unavailable"
    assert model_status(client, MODEL) in ("available", "loaded")
    refused = client.post("/responses", json=ask())
    assert_problem(refused, 503, "engine_unavailable")
    assert refused.headers["retry-after"].isdigit()
    task = client.post("/tasks", json={"type": "response", "request": ask()})
    assert_problem(task, 503, "engine_unavailable")
    local = client.post("/responses", json={**ask(), "model": MODEL})
    assert local.status_code == 200, local.text

    remote.start()
    recovered = client.post("/responses", json=ask())
    assert recovered.status_code == 200, recovered.text
    assert model_status(client, REMOTE_MODEL) == "available"
