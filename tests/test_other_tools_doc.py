"""docs/other-tools.md works as written: its curl, Python and Node blocks, run against the server.

Blocks fenced ``bash``, ``python`` and ``js`` are run; ``sh``, ``py`` and ``javascript`` blocks
(setting up, configuration, browser code) are only shown.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from benchmarks.harness.sse import parse_events
from tests.conftest import READER_TOKEN, LiveServer
from tests.docs_blocks import code_blocks, run_block
from tests.helpers import JS_CLIENTS, ROOT, install_js_clients

PAGE = (ROOT / "docs" / "other-tools.md").read_text()
#: What each block printed, by language, in page order.
Outputs = dict[str, list[subprocess.CompletedProcess[str]]]
FINAL = r"response\.(completed|incomplete|failed|cancelled)"


@pytest.fixture(scope="module")
def outputs(live_server: LiveServer) -> Outputs:
    """Every runnable block's result, by language, in page order."""
    env = {
        **os.environ,
        "LMSP": live_server.lmsp,
        "JUPYTER_TOKEN": live_server.token,
        "READER_TOKEN": READER_TOKEN,
    }
    install_js_clients()  # the js blocks import the OpenAI SDK and the AI SDK from there
    results = {
        language: [
            run_block(language, block, env, cwd=JS_CLIENTS) for block in code_blocks(PAGE, language)
        ]
        for language in ("bash", "python", "js")
    }
    failed = [r.stderr for runs in results.values() for r in runs if r.returncode != 0]
    assert failed == []
    return results


def sse_events(text: str) -> list[tuple[int, str, dict[str, object]]]:
    """``(id, event, data)`` of each event in a server-sent event stream, read with the
    client's parser."""
    return [(int(e.id), e.event, json.loads(e.data)) for e in parse_events(text.encode())]


def test_the_page_has_the_blocks_these_tests_check(outputs: Outputs) -> None:
    assert {language: len(runs) for language, runs in outputs.items()} == {
        "bash": 9,
        "python": 6,
        "js": 4,
    }


def test_no_token_is_401_and_the_jupyter_token_is_200(outputs: Outputs) -> None:
    assert outputs["bash"][0].stdout == "401\n200\n"


def test_a_reader_token_lists_models_but_may_not_ask(outputs: Outputs) -> None:
    status, problem = outputs["bash"][1].stdout.split("\n", 1)
    assert status == "200"
    assert json.loads(problem) == {
        "type": "about:blank",
        "title": "Insufficient scope",
        "status": 403,
        "code": "insufficient_scope",
        "detail": "this token lacks the scope 'responses:write'",
        "message": "this token lacks the scope 'responses:write'",
    }


def test_a_configured_token_from_another_origin_is_forbidden_origin(outputs: Outputs) -> None:
    assert outputs["bash"][2].stdout == "403\n"


def test_curl_sync_answer_stops_at_max_output_tokens(outputs: Outputs) -> None:
    answer = json.loads(outputs["bash"][3].stdout)
    assert (answer["object"], answer["status"], answer["model"]) == (
        "response",
        "incomplete",
        "gemma3:270m-q4_k_m",
    )
    assert answer["usage"]["output_tokens"] == 8
    assert answer["incomplete_details"] == {"reason": "max_output_tokens"}


def test_curl_stream_is_numbered_events_ending_with_one_final_event(outputs: Outputs) -> None:
    stream = outputs["bash"][4].stdout
    assert stream.startswith("retry: 2000\nid: 1\nevent: response.created\n")
    events = sse_events(stream)
    assert [number for number, _, _ in events] == list(range(1, len(events) + 1))
    assert [name for _, name, _ in events if re.fullmatch(FINAL, name)] == ["response.incomplete"]
    assert events[-1][1] == "response.incomplete"


def test_curl_task_events_replay_after_last_event_id(outputs: Outputs) -> None:
    printed = outputs["bash"][5].stdout
    task = json.loads(printed[printed.rindex('{"id":"task_') :])
    assert (task["status"], task["result"]["status"]) == ("incomplete", "incomplete")
    first, replay = printed[: printed.rindex('{"id":"task_')].split("retry: 2000\n")[1:]
    everything = sse_events(first)
    assert [number for number, _, _ in everything] == list(range(1, task["last_event_id"] + 1))
    assert sse_events(replay) == everything[3:]


def test_curl_cancel_ends_the_task_with_response_cancelled(outputs: Outputs) -> None:
    assert outputs["bash"][6].stdout == "200\n200\nevent: response.cancelled\n"


def test_httpx_example_prints_status_text_and_final_event(outputs: Outputs) -> None:
    printed = outputs["python"][0].stdout
    assert re.fullmatch(r"200 incomplete\n.+\nresponse\.incomplete\n", printed, re.S)


def test_lmsp_client_example_follows_the_task_to_its_final_event(outputs: Outputs) -> None:
    lines = outputs["python"][1].stdout.splitlines()
    assert lines[0] == "incomplete"
    assert lines[1] == "1 response.created"
    assert lines[-2].endswith(" response.incomplete")
    assert [int(line.split()[0]) for line in lines[1:-1]] == list(range(1, len(lines) - 1))
    assert lines[-1] == "incomplete"


def test_node_fetch_example_prints_status_text_and_final_event(outputs: Outputs) -> None:
    printed = outputs["js"][0].stdout
    assert re.fullmatch(r"200 incomplete\n.+\nresponse\.incomplete\n", printed, re.S)


# --- OpenAI's clients (section 11) -------------------------------------------------------------


def test_openai_python_example(outputs: dict[str, list[subprocess.CompletedProcess[str]]]) -> None:
    lines = outputs["python"][2].stdout.splitlines()
    assert lines[0] == "incomplete True"
    assert lines[1] != ""  # the streamed text
    assert lines[2:] == ["Verdict", "length", "queued", "response.incomplete"]


def test_openai_js_example(outputs: dict[str, list[subprocess.CompletedProcess[str]]]) -> None:
    lines = outputs["js"][1].stdout.splitlines()
    assert lines[0] == "incomplete"
    assert lines[-1] == "8 tokens"


def test_ai_sdk_example(outputs: dict[str, list[subprocess.CompletedProcess[str]]]) -> None:
    lines = outputs["js"][2].stdout.splitlines()
    assert lines[0] == "length true"
    assert lines[-1] == "boolean"


def test_langchain_example(outputs: dict[str, list[subprocess.CompletedProcess[str]]]) -> None:
    lines = outputs["python"][3].stdout.splitlines()
    assert lines[0] in ("length", "stop")
    assert lines[-1] == "Verdict"


def test_editor_chat_completions_example(outputs: Outputs) -> None:
    completion = json.loads(outputs["bash"][7].stdout)
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["finish_reason"] == "length"
    assert completion["choices"][0]["message"]["content"] != ""
    assert completion["usage"]["completion_tokens"] == 8


# --- Ollama's clients --------------------------------------------------------------------------


def test_ollama_python_example(outputs: Outputs) -> None:
    lines = outputs["python"][4].stdout.splitlines()
    assert lines[0].startswith("['")
    assert lines[1] == "['completion', 'tools']"
    reason, text = lines[2].split(" ", 1)
    assert reason == "stop"
    assert isinstance(json.loads(text)["blue"], bool)


def test_ollama_curl_example(outputs: Outputs) -> None:
    last = json.loads(outputs["bash"][8].stdout)
    assert (last["done"], last["done_reason"], last["eval_count"]) == (True, "length", 8)


# --- Anthropic's clients -----------------------------------------------------------------------


def test_anthropic_python_example(outputs: Outputs) -> None:
    lines = outputs["python"][5].stdout.splitlines()
    assert lines[0] == "claude-sonnet-4-5 max_tokens 8"
    assert len(lines) >= 3  # the streamed text between (sampled: it may be blank lines)
    assert lines[-1] == "True"


def test_anthropic_js_example(outputs: Outputs) -> None:
    lines = outputs["js"][3].stdout.splitlines()
    assert len(lines) >= 2  # the streamed text before (sampled: it may be blank lines)
    assert lines[-1] == "max_tokens 8"
