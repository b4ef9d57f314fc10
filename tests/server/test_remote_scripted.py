"""LMSP in front of a scripted OpenAI-compatible server, for what the bundled model cannot show.

The bundled model does not reason, and the real servers of tests/server/test_remote.py count
their prompts: a tiny HTTP server in the test streams reasoning the way llama-server and vLLM's
reasoning parsers do (``reasoning_content``), reports no usage in its streams, and has no
endpoint to count tokens with. The Jupyter server in front of it is real.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, running_server
from tests.server.helpers import assert_problem, parse_sse

MODEL = "scripted/thinker"
WINDOW = 1024
#: What the scripted server streams for every chat request: reasoning, then the answer.
DELTAS = [
    {"role": "assistant", "reasoning_content": "The sky "},
    {"reasoning_content": "is blue."},
    {"reasoning_content": None, "content": "Blue"},
    {"content": "."},
]
#: The prompt tokens it reports when asked without streaming.
PROMPT_TOKENS = 21
#: What it streams for every Completions request (its own ``/completions``).
TEXTS = ["    return ", "fib(n - 1)"]


def chunks(kind: str, field: str, values: list[Any]) -> list[dict[str, Any]]:
    """OpenAI's stream chunks of ``kind`` (their ``object``), each with one choice that has a
    value as its ``field``; the last choice finishes (``stop``)."""
    finishes = [None] * (len(values) - 1) + ["stop"]
    return [
        {"object": kind, "choices": [{"index": 0, field: value, "finish_reason": finish}]}
        for value, finish in zip(values, finishes, strict=True)
    ]


class ScriptedServer(ThreadingHTTPServer):
    """Records every request as (method, path, JSON body)."""

    requests: list[tuple[str, str, Any]]


class Handler(BaseHTTPRequestHandler):
    server: ScriptedServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.requests.append(("GET", self.path, None))
        if self.path == "/v1/models":
            self._json(
                200, {"object": "list", "data": [{"id": "thinker", "max_model_len": WINDOW}]}
            )
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append(("POST", self.path, body))
        if self.path == "/v1/completions":
            self._texts()
        elif self.path != "/v1/chat/completions":
            self._json(404, {"error": {"message": "not found"}})
        elif not body["stream"]:
            usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": 1, "total_tokens": 22}
            message = {"role": "assistant", "content": "Blue"}
            choice = {"index": 0, "message": message, "finish_reason": "length"}
            self._json(200, {"object": "chat.completion", "choices": [choice], "usage": usage})
        else:
            self._stream(chunks("chat.completion.chunk", "delta", DELTAS))

    def _texts(self) -> None:
        """A streamed Completion: ``TEXTS``, then the usage, as OpenAI streams one."""
        usage = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
        last = {"object": "text_completion", "choices": [], "usage": usage}
        self._stream([*chunks("text_completion", "text", TEXTS), last])

    def _stream(self, chunks: Iterable[dict[str, Any]]) -> None:
        """An OpenAI stream: each chunk an SSE ``data`` line, then ``[DONE]``."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def serving(handler: type[Handler] = Handler) -> Iterator[ScriptedServer]:
    """A scripted server answering with ``handler`` on a loopback port, for the block."""
    server = ScriptedServer(("127.0.0.1", 0), handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedServer]:
    with serving() as server:
        yield server


@pytest.fixture(scope="module")
def live_server(
    scripted: ScriptedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """A Jupyter server with the extension offering the scripted server's model (in place of
    conftest's, so that its ``client`` fixture talks to this one)."""
    remote = {
        "name": "scripted",
        "url": f"http://127.0.0.1:{scripted.server_address[1]}/v1",
        "capabilities": ["streaming", "reasoning"],
    }
    config = {"EngineRouter": {"remote_servers": [remote]}}
    with running_server(tmp_path_factory.mktemp("lmsp"), config=config) as server:
        yield server


def chat_requests(scripted: ScriptedServer) -> list[dict[str, Any]]:
    return [body for _, path, body in scripted.requests if path == "/v1/chat/completions"]


def test_reasoning_content_becomes_a_reasoning_item_before_the_message(
    client: httpx.Client,
) -> None:
    body = {"model": MODEL, "input": "What colour is the sky?", "stream": True}
    with client.stream("POST", "/responses", json=body) as response:
        assert response.status_code == 200, response.read()
        events, _ = parse_sse(response.iter_lines())
    assert [(event.id, event.event) for event in events] == [
        (1, "response.created"),
        (2, "response.in_progress"),
        (3, "response.output_item.added"),
        (4, "response.reasoning_summary_part.added"),
        (5, "response.reasoning_summary_text.delta"),
        (6, "response.reasoning_summary_text.delta"),
        (7, "response.reasoning_summary_text.done"),
        (8, "response.reasoning_summary_part.done"),
        (9, "response.output_item.done"),
        (10, "response.output_item.added"),
        (11, "response.content_part.added"),
        (12, "response.output_text.delta"),
        (13, "response.output_text.delta"),
        (14, "response.output_text.done"),
        (15, "response.content_part.done"),
        (16, "response.output_item.done"),
        (17, "response.completed"),
    ]
    reasoning, message = events[8].data["item"], events[15].data["item"]
    assert events[2].data["item"]["type"] == "reasoning"
    assert reasoning["id"] == events[2].data["item"]["id"]
    assert reasoning["id"].startswith("rs_")
    assert reasoning["summary"] == [{"type": "summary_text", "text": "The sky is blue."}]
    assert [events[4].data["delta"], events[5].data["delta"]] == ["The sky ", "is blue."]
    assert {events[4].data["item_id"], events[5].data["item_id"]} == {reasoning["id"]}
    assert (events[9].data["output_index"], events[15].data["output_index"]) == (1, 1)
    assert message["type"] == "message"
    assert message["content"][0]["text"] == "Blue."
    usage = events[-1].data["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (PROMPT_TOKENS, 4)
    assert usage["total_tokens"] == PROMPT_TOKENS + 4


def test_usage_a_stream_did_not_report_is_the_servers_count_of_the_same_request(
    client: httpx.Client, scripted: ScriptedServer
) -> None:
    before = len(chat_requests(scripted))
    body = {"model": MODEL, "input": "Sky?", "max_output_tokens": 50, "temperature": 0}
    response = client.post("/responses", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["input_tokens"] == PROMPT_TOKENS
    streamed, counted = chat_requests(scripted)[before:]
    assert streamed["stream"] is True
    assert streamed["stream_options"] == {"include_usage": True}
    unstreamed = {key: value for key, value in streamed.items() if key != "stream_options"}
    assert counted == {**unstreamed, "stream": False, "max_tokens": 1}


def test_a_prompt_over_the_window_of_a_server_that_cannot_count_is_refused_before_sending(
    client: httpx.Client, scripted: ScriptedServer
) -> None:
    before = len(scripted.requests)
    body = {"model": MODEL, "input": "word " * WINDOW, "max_output_tokens": 8}
    response = client.post("/responses", json=body)
    assert_problem(response, 400, "context_length_exceeded")
    assert response.json()["param"] == "max_output_tokens"
    assert "about " in response.json()["detail"]
    task = client.post("/tasks", json={"type": "response", "request": body})
    assert_problem(task, 400, "context_length_exceeded")
    asked = [(method, path) for method, path, _ in scripted.requests[before:]]
    assert ("POST", "/v1/chat/completions") not in asked


def test_a_completion_goes_to_the_servers_own_completions_with_its_suffix(
    client: httpx.Client, scripted: ScriptedServer
) -> None:
    body = {"model": MODEL, "prompt": "def fib(n):\n", "suffix": "\n", "max_tokens": 8}
    response = client.post("/completions", json=body)
    assert response.status_code == 200, response.text
    completion = response.json()
    assert completion["choices"][0]["text"] == "".join(TEXTS)  # raw text: no reasoning split
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert completion["usage"]["prompt_tokens"] == 7
    (sent,) = [body for _, path, body in scripted.requests if path == "/v1/completions"]
    assert (sent["model"], sent["prompt"], sent["suffix"]) == ("thinker", "def fib(n):\n", "\n")
    assert sent["stream"] is True and "messages" not in sent
