"""Ollama's NDJSON streams in the server process (pytest-jupyter): a client that leaves stops
the generation, a failure is the stream's last line in Ollama's error shape, and an idle stream
sends nothing that is not a JSON line."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL
from tests.server.helpers import LEFT_LIMIT, leave_mid_stream


def ollama_url(lmsp: httpx.AsyncClient, path: str) -> str:
    """``path`` of Ollama's API on the server that ``lmsp`` talks to."""
    return str(lmsp.base_url).removesuffix("/").removesuffix("/v1") + "/ollama" + path


async def lines_of(lmsp: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with lmsp.stream("POST", ollama_url(lmsp, "/api/generate"), json=body) as response:
        assert response.headers["Content-Type"] == "application/x-ndjson"
        return [json.loads(line) async for line in response.aiter_lines()]


async def test_a_client_leaving_stops_the_generation(
    lmsp: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {
        "model": MODEL,
        "prompt": "Write a long story.",
        "options": {"temperature": 0, "num_predict": LEFT_LIMIT},
    }
    await leave_mid_stream(lmsp, monkeypatch, ollama_url(lmsp, "/api/generate"), body)


@pytest.mark.script({"deltas": ["a", "b", "c"], "fail_after": 2})
async def test_a_failure_mid_stream_is_the_last_line_in_ollamas_shape(
    lmsp: httpx.AsyncClient,
) -> None:
    lines = await lines_of(lmsp, {"model": MODEL, "prompt": "x"})
    assert [line["response"] for line in lines[:-1]] == ["a", "b"]
    assert set(lines[-1]) == {"error"}
    assert lines[-1]["error"] != ""


@pytest.mark.script({"deltas": ["a", "b"], "delay": 0.4})
async def test_an_idle_stream_sends_only_json_lines(lmsp: httpx.AsyncClient) -> None:
    lines = await lines_of(lmsp, {"model": MODEL, "prompt": "x"})
    assert [line["done"] for line in lines] == [False, False, True]
    assert lines[-1]["done_reason"] == "stop"


@pytest.mark.script({"deltas": ["a", "b", "c"], "fail_after": 2})
async def test_a_failure_of_a_whole_answer_is_an_ollama_error(lmsp: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "prompt": "x", "stream": False}
    answer = await lmsp.post(ollama_url(lmsp, "/api/generate"), json=body)
    assert answer.status_code == 500
    assert set(answer.json()) == {"error"}
    assert "Traceback" not in answer.text
