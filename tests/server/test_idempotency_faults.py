"""Idempotency keys under failure (9.2): never a replay of an unfinished answer, never stuck.

The failures are injected in a server process of the test's own (pytest-jupyter) with a
scripted engine — a client that leaves mid-stream, a first attempt that fails on the server's
side — and, for a killed process, on a live server with the real model; each on a SQLite store
and on a PostgreSQL one.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from traitlets.config import Config

from tests.conftest import EDITOR_TOKEN, MODEL, LiveServer, Stores, running_server, start_server
from tests.helpers import eventually, eventually_async
from tests.server.helpers import (
    Event,
    assert_problem,
    claimed_keys,
    parse_sse,
    scripted_engine,
    server_config,
)

BODY: dict[str, Any] = {"model": MODEL, "input": "x"}


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest, stores: Stores) -> Config:
    """The test's own server on a new store of each kind in turn."""
    config = server_config(request, sse_keepalive_seconds=0.05)
    config.TaskStore.store_url = stores.new()
    return config


async def stream(client: httpx.AsyncClient, key: str, **fields: object) -> httpx.Response:
    body = {**BODY, "stream": True, **fields}
    response = await client.post("/responses", json=body, headers={"Idempotency-Key": key})
    return response


def events_of(response: httpx.Response) -> list[Event]:
    assert response.headers["content-type"].startswith("text/event-stream"), response.text
    events, _ = parse_sse(response.text.splitlines())
    return events


def frames(text: str) -> list[str]:
    """The lines of an SSE stream but its comments (keep-alives)."""
    return [line for line in text.splitlines() if not line.startswith(":")]


async def retry_until_free(client: httpx.AsyncClient, key: str) -> httpx.Response:
    """Retry while the first attempt is still being cut short (409), as a client would."""

    async def free() -> httpx.Response | None:
        response = await stream(client, key)
        return response if response.status_code != 409 else None

    return await eventually_async(free, what="the key free of idempotency_in_progress")


def assert_replayed(first: httpx.Response, again: httpx.Response) -> None:
    """Both succeeded: the first was generated, the second replayed."""
    assert first.status_code == again.status_code == 200
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"


# --- streams -----------------------------------------------------------------------------------


def same_stream(first: httpx.Response, again: httpx.Response) -> None:
    assert again.headers["cache-control"] == "no-cache"
    assert events_of(again) == events_of(first)
    assert events_of(first)[-1].event == "response.completed"


def same_chunks(first: httpx.Response, again: httpx.Response) -> None:
    assert again.headers["content-type"].startswith("text/event-stream")
    assert frames(again.text) == frames(first.text)  # keep-alive comments aside
    assert first.text.endswith("data: [DONE]\n\n")


def same_task_events(first: httpx.Response, again: httpx.Response) -> None:
    events = events_of(first)
    assert [e.event for e in events][:2] == ["response.created", "response.in_progress"]
    assert events[-1].event == "response.completed"
    assert events_of(again) == events


CHAT: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
#: A finished stream sent again with its key: the path, the body and what the replay repeats.
REPLAYED_STREAMS = [
    pytest.param("/responses", {**BODY, "stream": True}, same_stream, id="the same stream"),
    pytest.param(
        "/chat/completions", {**CHAT, "stream": True}, same_chunks, id="a chat's same chunks"
    ),
    pytest.param(
        "/responses",
        {**BODY, "stream": True, "background": True},
        same_task_events,
        id="a background stream's task events",
    ),
]


@pytest.mark.script({"deltas": ["Hel", "lo"]})
@pytest.mark.parametrize(("path", "body", "same"), REPLAYED_STREAMS)
async def test_a_finished_stream_replays_as_it_was_sent_and_is_generated_once(
    jp_serverapp: Any,
    lmsp: httpx.AsyncClient,
    path: str,
    body: dict[str, Any],
    same: Callable[[httpx.Response, httpx.Response], None],
) -> None:
    engine = scripted_engine(jp_serverapp)
    headers = {"Idempotency-Key": "stream-replay"}
    first = await lmsp.post(path, json=body, headers=headers)
    again = await lmsp.post(path, json=body, headers=headers)
    assert_replayed(first, again)
    same(first, again)
    assert len(engine.prompts) == 1  # generated once (a background stream: one task)


@pytest.mark.script({"deltas": ["a"] * 200, "delay": 0.02}, {"deltas": ["b"]})
async def test_a_stream_whose_client_left_is_not_replayed_and_its_key_is_free(
    lmsp: httpx.AsyncClient,
) -> None:
    headers = {"Idempotency-Key": "stream-left"}
    async with lmsp.stream(
        "POST", "/responses", json={**BODY, "stream": True}, headers=headers
    ) as response:
        deltas = 0
        async for line in response.aiter_lines():
            deltas += line == "event: response.output_text.delta"
            if deltas == 3:
                break
    again = await retry_until_free(lmsp, "stream-left")
    assert again.status_code == 200
    assert "idempotent-replayed" not in again.headers
    events = events_of(again)
    assert [e.event for e in events][-1] == "response.completed"
    assert "".join(e.data["delta"] for e in events if "delta" in e.data) == "b"


@pytest.mark.script({"deltas": ["a", "b"], "fail_after": 1}, {"deltas": ["ok"]})
async def test_a_stream_that_failed_on_the_server_frees_its_key(
    lmsp: httpx.AsyncClient,
) -> None:
    failed = events_of(await stream(lmsp, "stream-failed"))
    assert failed[-1].event == "response.failed"
    again = await stream(lmsp, "stream-failed")
    assert "idempotent-replayed" not in again.headers
    events = events_of(again)
    assert events[-1].event == "response.completed"
    assert events[0].data["response_id"] != failed[0].data["response_id"]


@pytest.mark.script({})
async def test_a_stream_refused_before_it_starts_replays_the_same_problem(
    lmsp: httpx.AsyncClient,
) -> None:
    first = await stream(lmsp, "stream-400", temperature=9)
    again = await stream(lmsp, "stream-400", temperature=9)
    assert assert_problem(first, 400, "invalid_request") == assert_problem(
        again, 400, "invalid_request"
    )
    assert again.headers["idempotent-replayed"] == "true"


# --- synchronous requests ----------------------------------------------------------------------


@pytest.mark.script({"deltas": ["a", "b"], "fail_after": 1}, {"deltas": ["ok"]})
async def test_a_5xx_first_attempt_is_not_kept(
    lmsp: httpx.AsyncClient,
) -> None:
    headers = {"Idempotency-Key": "sync-5xx"}
    first = await lmsp.post("/responses", json=BODY, headers=headers)
    assert_problem(first, 500, "generation_failed")
    again = await lmsp.post("/responses", json=BODY, headers=headers)
    assert again.status_code == 200
    assert "idempotent-replayed" not in again.headers
    assert again.json()["output"][0]["content"][0]["text"] == "ok"
    replay = await lmsp.post("/responses", json=BODY, headers=headers)
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == again.json()


@pytest.mark.script({})
async def test_the_same_json_value_is_the_same_request(
    lmsp: httpx.AsyncClient,
) -> None:
    headers = {"Idempotency-Key": "same-value", "Content-Type": "application/json"}
    first = await lmsp.post(
        "/responses",
        content=json.dumps({"model": MODEL, "input": "A", "temperature": 1}),
        headers=headers,
    )
    spellings = [
        '{"input":"A","model":"' + MODEL + '","temperature":1}',
        '{ "temperature" : 1.0 ,\n "input" : "\\u0041", "model": "' + MODEL + '" }',
        '{"model": "' + MODEL + '", "input": "A", "temperature": 1e0}',
    ]
    for spelling in spellings:
        again = await lmsp.post("/responses", content=spelling, headers=headers)
        assert again.headers.get("idempotent-replayed") == "true", spelling
        assert again.json() == first.json()
    other = '{"model": "' + MODEL + '", "input": "A", "temperature": 1.5}'
    reused = await lmsp.post("/responses", content=other, headers=headers)
    assert_problem(reused, 422, "idempotency_key_reused")


def test_a_key_is_scoped_to_its_token(live_server: LiveServer) -> None:
    key = {"Idempotency-Key": "shared-key"}
    body = {**BODY, "temperature": 0, "max_output_tokens": 1}
    with live_server.client() as mine, live_server.client(token=EDITOR_TOKEN) as editor:
        first = mine.post("/responses", json=body, headers=key)
        theirs = editor.post("/responses", json={**body, "input": "other"}, headers=key)
        assert first.status_code == theirs.status_code == 200
        assert "idempotent-replayed" not in theirs.headers
        assert theirs.json()["id"] != first.json()["id"]
        again = editor.post("/responses", json={**body, "input": "other"}, headers=key)
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["id"] == theirs.json()["id"]
        assert mine.post("/responses", json=body, headers=key).json()["id"] == first.json()["id"]


# --- a killed process --------------------------------------------------------------------------


def test_keys_of_requests_cut_short_by_a_killed_process_are_free_after_restart(
    tmp_path: Path, stores: Stores
) -> None:
    store = stores.new()
    lease = {"lease_seconds": 3.0, "lease_renew_seconds": 0.5}  # the restart waits this out
    config = {"TaskStore": {"store_url": store, **lease}}
    body = {"model": MODEL, "input": "Write a long story.", "temperature": 0}
    keys = {
        "sync": {"Idempotency-Key": "killed-sync"},
        "stream": {"Idempotency-Key": "killed-stream"},
    }
    server = start_server(tmp_path / "first", config=config)
    with ThreadPoolExecutor(2) as pool, server.client() as client:
        replies = [
            pool.submit(client.post, "/responses", json=body, headers=keys["sync"]),
            pool.submit(
                client.post, "/responses", json={**body, "stream": True}, headers=keys["stream"]
            ),
        ]
        eventually(
            lambda: claimed_keys(store) == {"killed-sync", "killed-stream"},
            what="both keys",
        )
        server.process.send_signal(signal.SIGKILL)
        server.process.wait()
        for reply in replies:
            with pytest.raises(httpx.TransportError):
                reply.result()
    assert claimed_keys(store) == {"killed-sync", "killed-stream"}
    with running_server(tmp_path / "second", config=config) as again, again.client() as client:
        eventually(lambda: not claimed_keys(store), what="the killed server's keys freed")
        short = {**body, "max_output_tokens": 2}
        response = client.post("/responses", json=short, headers=keys["sync"])
        assert response.status_code == 200, response.text
        assert "idempotent-replayed" not in response.headers
        assert response.json()["status"] == "incomplete"
        short["stream"] = True
        response = client.post("/responses", json=short, headers=keys["stream"])
        assert response.status_code == 200, response.text
        assert "idempotent-replayed" not in response.headers
        events, _ = parse_sse(response.text.splitlines())
        assert events[-1].event == "response.incomplete"
        replay = client.post("/responses", json=short, headers=keys["stream"])
        assert replay.headers["idempotent-replayed"] == "true"
        assert parse_sse(replay.text.splitlines())[0] == events
