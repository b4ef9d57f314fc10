"""Anthropic's Messages streams in the server process (pytest-jupyter): a client that leaves
stops the generation, a failure is an ``error`` event in Anthropic's shape, an idle stream sends
``ping`` events, and the key comes as ``x-api-key`` with Claude Code's query and headers."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL
from tests.server.helpers import LEFT_LIMIT, leave_mid_stream


def messages_url(lmsp: httpx.AsyncClient, path: str = "/v1/messages") -> str:
    """``path`` of Anthropic's API on the server that ``lmsp`` talks to."""
    return str(lmsp.base_url).removesuffix("/").removesuffix("/v1") + "/anthropic" + path


def ask(tokens: int = 8, **fields: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": tokens,
        "messages": [{"role": "user", "content": "Write a long story."}],
        **fields,
    }


async def events_of(lmsp: httpx.AsyncClient, body: dict[str, Any]) -> list[tuple[str, Any]]:
    """The stream's events: each ``event`` name with its ``data``; nothing else is sent."""
    async with lmsp.stream("POST", messages_url(lmsp), json=body) as response:
        assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        text = (await response.aread()).decode()
    events = []
    for frame in text.split("\n\n")[:-1]:
        name, data = frame.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), frame
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    assert all(data["type"] == name for name, data in events)
    return events


async def test_a_client_leaving_stops_the_generation(
    lmsp: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = ask(LEFT_LIMIT, stream=True, temperature=0)
    deltas = lambda line: '"text_delta"' in line  # noqa: E731
    await leave_mid_stream(lmsp, monkeypatch, messages_url(lmsp), body, deltas)


@pytest.mark.script({"deltas": ["a", "b", "c"], "fail_after": 2})
async def test_a_failure_mid_stream_is_an_error_event_in_anthropics_shape(
    lmsp: httpx.AsyncClient,
) -> None:
    events = await events_of(lmsp, ask(stream=True))
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    texts = [data["delta"]["text"] for name, data in events if name == "content_block_delta"]
    assert texts == ["a", "b"]
    name, data = events[-1]
    assert name == "error"
    assert data["error"]["type"] == "api_error" and data["error"]["message"]


@pytest.mark.script({"deltas": ["a", "b"], "delay": 0.4})
async def test_an_idle_stream_sends_ping_events(lmsp: httpx.AsyncClient) -> None:
    events = await events_of(lmsp, ask(stream=True))
    names = [name for name, _ in events]
    assert names.count("ping") > 1  # the opening one, then while the model is quiet
    assert [name for name in names if name != "ping"] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[-2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}


@pytest.mark.script({"deltas": ["a", "b", "c"], "fail_after": 2})
async def test_a_failure_of_a_whole_answer_is_an_api_error(lmsp: httpx.AsyncClient) -> None:
    answer = await lmsp.post(messages_url(lmsp), json=ask())
    assert answer.status_code == 500
    assert answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == "api_error"
    assert "Traceback" not in answer.text


@pytest.mark.script({"deltas": ["a", "b"]})
async def test_the_key_may_come_as_x_api_key_with_claude_codes_query_and_headers(
    lmsp: httpx.AsyncClient, jp_auth_header: dict[str, str]
) -> None:
    token = jp_auth_header["Authorization"].split()[-1]
    headers = {
        "x-api-key": token,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219,a-beta-nobody-knows-2099-01-01",
    }
    url = messages_url(lmsp) + "?beta=true"
    async with httpx.AsyncClient(timeout=60) as bare:
        answer = await bare.post(url, json=ask(), headers=headers)
    async with httpx.AsyncClient(timeout=60) as bare:  # no cookie from the answer before
        refused = await bare.post(url, json=ask(), headers={**headers, "x-api-key": "wrong"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["content"] == [{"type": "text", "text": "ab"}]
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"


@pytest.mark.script({"deltas": ["a"]})
async def test_another_path_is_not_found_in_anthropics_shape(lmsp: httpx.AsyncClient) -> None:
    answer = await lmsp.post(messages_url(lmsp, "/v1/messages/batches"), json={})
    assert answer.status_code == 404
    assert answer.json()["error"]["type"] == "not_found_error"
