"""The extension inside a Jupyter server process (pytest-jupyter), and ``jupyter lmsp``."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import MODEL, start_server, stop_server
from tests.server.helpers import LEFT_LIMIT, ask, leave_mid_stream, parse_sse


async def test_mounted_under_the_servers_base_url(
    lmsp: httpx.AsyncClient, jp_base_url: str
) -> None:
    assert jp_base_url != "/"
    response = await lmsp.get("")
    assert response.status_code == 200
    assert response.json()["object"] == "service"


@pytest.mark.script({"deltas": ["a", "b"], "delay": 0.4})
async def test_keep_alive_comments_while_idle(lmsp: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "input": "x", "stream": True}
    async with lmsp.stream("POST", "/responses", json=body) as response:
        lines = [line async for line in response.aiter_lines()]
    events, comments = parse_sse(lines)
    assert comments and set(comments) == {": keep-alive"}
    first_delta = lines.index("event: response.output_text.delta")
    assert lines.index(": keep-alive") < first_delta
    assert [e.event for e in events][-1] == "response.completed"


@pytest.mark.script({"deltas": ["a", "b", "c"], "fail_after": 2})
async def test_failure_mid_stream_ends_with_one_response_failed(lmsp: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "input": "x", "stream": True}
    async with lmsp.stream("POST", "/responses", json=body) as response:
        events, _ = parse_sse([line async for line in response.aiter_lines()])
    assert [e.event for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    assert [e.id for e in events] == list(range(1, 11))
    assert [e.data["sequence_number"] for e in events] == list(range(1, 11))
    assert events[-1].data["response"]["status"] == "failed"
    assert events[-1].data["status"] == "failed"
    assert events[-1].data["error"]["code"] == "generation_failed"


@pytest.mark.script({"deltas": ["a", "b"], "fail_after": 1}, {"deltas": ["ok"]})
async def test_failure_in_a_sync_request_is_generation_failed_problem(
    lmsp: httpx.AsyncClient,
) -> None:
    response = await lmsp.post("/responses", json={"model": MODEL, "input": "x"})
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "generation_failed"
    assert "Traceback" not in response.text
    after = await lmsp.post("/responses", json={"model": MODEL, "input": "x"})
    assert after.status_code == 200
    assert after.json()["output"][0]["content"][0]["text"] == "ok"


async def test_disconnect_stops_generation_and_frees_the_model(
    lmsp: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = ask("Write a long story.", LEFT_LIMIT, stream=True)
    delta = "event: response.output_text.delta"
    await leave_mid_stream(lmsp, monkeypatch, "/responses", body, lambda line: line == delta)
    after = await lmsp.post("/responses", json=ask("Hi", 2))
    assert after.status_code == 200
    assert after.json()["usage"]["output_tokens"] == 2


def test_jupyter_lmsp_runs_the_service_standalone(tmp_path: Path) -> None:
    server = start_server(tmp_path, app="lmsp", base_url="/")
    try:
        with server.client() as client:
            assert client.get("").json()["lmsp_version"] == "1.0"
            models = client.get("/models").json()["data"]
            assert MODEL in [m["id"] for m in models]
    finally:
        stop_server(server)
