"""Anthropic's TypeScript SDK (``@anthropic-ai/sdk``), unmodified, against the Messages API on
the Jupyter port, run by node from ``tests/compat/js`` (``anthropic.mjs``): create, a raw
stream, the stream helper's text and final message, and an error in Anthropic's shape."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import MODEL, LiveServer
from tests.helpers import run_js_client


@pytest.fixture(scope="module")
def results(live_server: LiveServer) -> dict[str, Any]:
    """What each call of ``anthropic.mjs`` gave."""
    env = {
        "ANTHROPIC_BASE_URL": f"{live_server.root}lmsp/anthropic",
        "LMSP_TOKEN": live_server.token,
        "LMSP_MODEL": MODEL,
    }
    return run_js_client("anthropic.mjs", env)


def test_create_says_what_lmsp_says(results: dict[str, Any], client: httpx.Client) -> None:
    body = {
        "model": MODEL,
        "input": "Name three colours.",
        "temperature": 0,
        "max_output_tokens": 8,
    }
    lmsp = client.post("/responses", json=body).json()
    text = "".join(part["text"] for part in lmsp["output"][0]["content"])
    created = results["create"]
    assert created["text"] == text != ""
    assert (created["stopReason"], created["usage"]["output_tokens"]) == ("max_tokens", 8)


def test_a_raw_stream_is_anthropics_event_sequence(results: dict[str, Any]) -> None:
    events = [event for event in results["events"] if event != "ping"]
    assert events[:2] == ["message_start", "content_block_start"]
    assert set(events[2:-3]) == {"content_block_delta"}
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]


def test_the_stream_helper_gives_the_text_and_the_final_message(results: dict[str, Any]) -> None:
    stream = results["stream"]
    assert stream["text"] == stream["final"] == results["create"]["text"]
    assert stream["stopReason"] == "max_tokens"


def test_an_error_is_anthropics(results: dict[str, Any]) -> None:
    error = results["error"]
    assert error["status"] == 400
    assert error["body"]["type"] == "error"
    assert error["body"]["error"]["type"] == "invalid_request_error"
