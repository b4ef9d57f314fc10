"""Ollama's API at ``<base_url>lmsp/ollama``, through the ``ollama`` Python library unmodified,
against the live server and the bundled model.

Shapes, agreement between runs and decoder-enforced output only: the bundled model is a small
base model whose sampled text no test names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import ollama
import pytest

from lmsp_jupyter.protocol.ollama import OLLAMA_VERSION
from tests.conftest import MODEL, READER_TOKEN, LiveServer
from tests.server.test_remote import WEATHER

#: Greedy and short: runs of the same request agree.
GREEDY = {"temperature": 0, "num_predict": 8}
#: The weather tool of the remote tests, in Ollama's (Chat Completions') shape.
#: A prefix and a suffix of code, for raw prompts and fill-in-the-middle.
CODE, SUFFIX = "def fibonacci(n):\n", "\n    return a\n"
WEATHER_TOOL = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}


def ollama_host(live_server: LiveServer) -> str:
    """What an Ollama client takes as its host: the Jupyter server's Ollama API."""
    return f"{live_server.root}lmsp/ollama"


@pytest.fixture
def client(live_server: LiveServer) -> Iterator[ollama.Client]:
    """``ollama.Client`` pointed at the Jupyter port, with the Jupyter token."""
    headers = {"Authorization": f"Bearer {live_server.token}"}
    with ollama.Client(host=ollama_host(live_server), headers=headers) as client:
        yield client


@pytest.fixture
def raw(live_server: LiveServer) -> Iterator[httpx.Client]:
    """A plain HTTP client of the Ollama API, with the Jupyter token."""
    headers = {"Authorization": f"Bearer {live_server.token}"}
    with httpx.Client(base_url=ollama_host(live_server), headers=headers, timeout=120) as http:
        yield http


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_version_is_one_vs_code_accepts(raw: httpx.Client) -> None:
    answer = raw.get("/api/version")
    assert answer.status_code == 200
    assert answer.json() == {"version": OLLAMA_VERSION}
    assert version(answer.json()["version"]) >= (0, 6, 4)


def test_root_says_ollama_is_running(raw: httpx.Client) -> None:
    answer = raw.get("/")
    assert answer.status_code == 200
    assert answer.text == "Ollama is running"
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"  # not JSON (found fuzzing)


def test_list_names_the_bundled_model(client: ollama.Client) -> None:
    models = {model.model: model for model in client.list().models}
    assert MODEL in models
    listed = models[MODEL]
    assert listed.details is not None
    assert listed.details.format == "gguf"
    assert listed.details.family
    assert listed.size is not None and listed.size > 0
    assert listed.digest and len(listed.digest) == 64


def test_show_has_capabilities_model_info_and_details(client: ollama.Client) -> None:
    shown = client.show(MODEL)
    assert shown.capabilities is not None
    assert {"completion", "tools"} <= set(shown.capabilities)
    assert "thinking" not in shown.capabilities  # Gemma 3 270M writes no reasoning
    assert shown.modelinfo is not None and shown.details is not None
    family = shown.modelinfo["general.architecture"]
    assert family == shown.details.family
    assert shown.modelinfo[f"{family}.context_length"] > 0


def test_ps_lists_the_loaded_model(client: ollama.Client) -> None:
    client.generate(MODEL, "Hello", options=GREEDY)
    running = {model.model: model for model in client.ps().models}
    assert MODEL in running
    context_length = running[MODEL].context_length
    assert context_length is not None and context_length > 0
    assert running[MODEL].expires_at is not None


def test_chat_streamed_and_whole_agree(client: ollama.Client) -> None:
    messages = [{"role": "user", "content": "Name a colour."}]
    whole = client.chat(MODEL, messages=messages, options=GREEDY)
    chunks = list(client.chat(MODEL, messages=messages, options=GREEDY, stream=True))
    assert all(not chunk.done for chunk in chunks[:-1])
    last = chunks[-1]
    assert last.done and whole.done
    assert "".join(chunk.message.content or "" for chunk in chunks) == whole.message.content
    assert whole.message.role == "assistant"
    for answer in (whole, last):
        assert answer.done_reason == "length"
        assert answer.eval_count == 8
        assert answer.prompt_eval_count is not None and answer.prompt_eval_count > 0
        assert answer.total_duration is not None and answer.eval_duration is not None
        assert answer.total_duration >= answer.eval_duration > 0


def test_generate_streamed_and_whole_agree(client: ollama.Client) -> None:
    whole = client.generate(MODEL, "The sky is", options=GREEDY)
    chunks = list(client.generate(MODEL, "The sky is", options=GREEDY, stream=True))
    assert "".join(chunk.response or "" for chunk in chunks) == whole.response != ""
    assert chunks[-1].done and chunks[-1].done_reason == whole.done_reason == "length"
    assert whole.eval_count == chunks[-1].eval_count == 8


def test_a_raw_prompt_is_continued_as_completions_continue_it(
    client: ollama.Client, live_server: LiveServer
) -> None:
    whole = client.generate(MODEL, CODE, raw=True, options=GREEDY)
    chunks = list(client.generate(MODEL, CODE, raw=True, options=GREEDY, stream=True))
    assert "".join(chunk.response or "" for chunk in chunks) == whole.response
    completion = {"model": MODEL, "prompt": CODE, "temperature": 0, "max_tokens": 8}
    with live_server.client() as lmsp:
        completed = lmsp.post("/completions", json=completion).json()
    assert whole.response == completed["choices"][0]["text"]
    assert whole.prompt_eval_count == completed["usage"]["prompt_tokens"]
    assert whole.eval_count == completed["usage"]["completion_tokens"]
    # The bundled base model has no chat template: not raw, its prompt is the text as written.
    templated = client.generate(MODEL, CODE, options=GREEDY)
    assert (templated.response, templated.prompt_eval_count) == (
        whole.response,
        whole.prompt_eval_count,
    )


def test_without_fim_tokens_a_suffix_is_left_out(client: ollama.Client) -> None:
    assert "insert" not in (client.show(MODEL).capabilities or [])
    alone = client.generate(MODEL, CODE, raw=True, options=GREEDY)
    suffixed = client.generate(MODEL, CODE, suffix=SUFFIX, options=GREEDY)
    assert suffixed.response == alone.response
    assert suffixed.prompt_eval_count == alone.prompt_eval_count
    streamed = list(client.generate(MODEL, CODE, suffix=SUFFIX, options=GREEDY, stream=True))
    assert "".join(chunk.response or "" for chunk in streamed) == alone.response
    # Ollama's fill-in-the-middle templates leave the system prompt out
    with_system = client.generate(MODEL, CODE, suffix=SUFFIX, system="Be brief.", options=GREEDY)
    assert with_system.prompt_eval_count == alone.prompt_eval_count


def test_num_ctx_does_not_change_the_window(client: ollama.Client, live_server: LiveServer) -> None:
    """A model's window is set when it loads: ``num_ctx`` is accepted and not applied, a
    prompt longer than it is read whole, and one over the server's window is refused."""
    alone = client.generate(MODEL, CODE, raw=True, options=GREEDY)
    small = client.generate(MODEL, CODE, raw=True, options={**GREEDY, "num_ctx": 2})
    assert small.response == alone.response
    assert small.prompt_eval_count == alone.prompt_eval_count
    assert small.prompt_eval_count is not None and small.prompt_eval_count > 2
    with live_server.client() as lmsp:
        window = lmsp.get(f"/models/{MODEL}").json()["context_length"]
    with pytest.raises(ollama.ResponseError) as caught:
        client.generate(MODEL, "word " * window, options={**GREEDY, "num_ctx": 2 * window})
    assert caught.value.status_code == 400 and "context window" in caught.value.error


def test_stop_ends_with_done_reason_stop(client: ollama.Client) -> None:
    free = client.generate(MODEL, "Count: 1, 2, 3,", options={"temperature": 0, "num_predict": 12})
    stop = (free.response or "").strip()[:1]
    if not stop:
        pytest.skip("the model wrote only spaces")
    stopped = client.generate(
        MODEL, "Count: 1, 2, 3,", options={"temperature": 0, "num_predict": 12, "stop": [stop]}
    )
    assert stopped.done_reason == "stop"
    assert stop not in (stopped.response or "")


def test_format_schema_is_enforced(client: ollama.Client) -> None:
    schema = {
        "type": "object",
        "properties": {"sunny": {"type": "boolean"}},
        "required": ["sunny"],
        "additionalProperties": False,
    }
    messages = [{"role": "user", "content": "Is it sunny in Paris?"}]
    answer = client.chat(MODEL, messages=messages, format=schema, options={"num_predict": 64})
    assert answer.done_reason == "stop"
    jsonschema.validate(json.loads(answer.message.content or ""), schema)


def test_format_json_is_an_object(client: ollama.Client) -> None:
    options = {"temperature": 0, "num_predict": 128}
    answer = client.generate(MODEL, "A JSON object:", format="json", options=options)
    text = answer.response or ""
    assert text.lstrip().startswith("{")
    if answer.done_reason == "stop":  # an object cut short by num_predict is not one yet
        assert isinstance(json.loads(text), dict)


def test_chat_with_tools_answers_with_text_or_a_call(client: ollama.Client) -> None:
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    for answer in [
        client.chat(MODEL, messages=messages, tools=[WEATHER_TOOL], options={"num_predict": 48}),
        *client.chat(
            MODEL,
            messages=messages,
            tools=[WEATHER_TOOL],
            options={"num_predict": 48},
            stream=True,
        ),
    ]:
        for call in answer.message.tool_calls or []:
            assert call.function.name == "get_weather"
            assert isinstance(call.function.arguments, dict)


def test_a_tool_round_trip_is_rendered(client: ollama.Client) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "tool_name": "get_weather", "content": "Sunny, 24 °C."},
    ]
    answer = client.chat(MODEL, messages=messages, tools=[WEATHER_TOOL], options=GREEDY)
    assert answer.done
    assert answer.prompt_eval_count is not None and answer.prompt_eval_count > 20


def test_a_tool_message_must_answer_a_call(client: ollama.Client) -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "tool", "content": "Sunny."},
    ]
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(MODEL, messages=messages)
    assert caught.value.status_code == 400
    assert "tool call" in caught.value.error


def test_an_empty_prompt_loads_and_keep_alive_0_unloads(client: ollama.Client) -> None:
    loaded = client.generate(MODEL, "")
    assert loaded.done and loaded.done_reason == "load"
    assert MODEL in {model.model for model in client.ps().models}
    unloaded = client.generate(MODEL, "", keep_alive=0)
    assert unloaded.done_reason == "unload"
    assert MODEL not in {model.model for model in client.ps().models}


def test_keep_alive_sets_when_the_model_expires(raw: httpx.Client, client: ollama.Client) -> None:
    answer = raw.post("/api/generate", json={"model": MODEL, "prompt": "", "keep_alive": "-1"})
    assert answer.json()["done_reason"] == "load"
    forever = next(model for model in client.ps().models if model.model == MODEL)
    raw.post("/api/generate", json={"model": MODEL, "prompt": "", "keep_alive": "10m"})
    ten_minutes = next(model for model in client.ps().models if model.model == MODEL)
    assert forever.expires_at is not None and ten_minutes.expires_at is not None
    assert forever.expires_at > ten_minutes.expires_at
    raw.post("/api/generate", json={"model": MODEL, "prompt": "", "keep_alive": "5m"})


@pytest.mark.parametrize(
    ("call", "status", "words"),
    [
        (
            lambda c: c.chat("no-such-model", messages=[{"role": "user", "content": "Hi"}]),
            404,
            "not found",
        ),
        (lambda c: c.generate(MODEL, "Hi", options={"temperature": 5}), 400, "temperature"),
        (lambda c: c.generate(MODEL, "Hi", options={"top_k": "many"}), 400, "top_k"),
        (lambda c: c.generate(MODEL, "Hi", keep_alive="soon"), 400, "keep_alive"),
        (lambda c: c.generate(MODEL, "Hi", think=True), 400, "thinking"),
        (lambda c: c.generate(MODEL, "Hi", raw=True, system="Be brief."), 400, "raw mode"),
        (lambda c: c.generate(MODEL, "Hi", raw=True, template="{{ .Prompt }}"), 400, "raw mode"),
        (lambda c: c.generate(MODEL, "Hi", template="{{ .Prompt }}"), 400, "template"),
        (
            lambda c: c.chat(
                MODEL,
                messages=[{"role": "user", "content": "Hi"}],
                format={"type": "object", "properties": {"a": {"type": "nonsense"}}},
            ),
            400,
            "JSON Schema",
        ),
        (lambda c: c.pull(MODEL), 400, "pull"),
        (lambda c: c.delete(MODEL), 400, "delete"),
        (lambda c: c.copy(MODEL, "copy"), 400, "copy"),
        (lambda c: c.show("no-such-model"), 404, "not found"),
    ],
)
def test_bad_input_gets_an_ollama_error(
    client: ollama.Client, call: Any, status: int, words: str
) -> None:
    with pytest.raises(ollama.ResponseError) as caught:
        call(client)
    assert caught.value.status_code == status
    assert words in caught.value.error


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"model": 5}', b'{"model": "x", "messages": "Hi"}', b'{"stream": 1}'],
)
def test_malformed_bodies_get_400(raw: httpx.Client, body: bytes) -> None:
    answer = raw.post("/api/chat", content=body)
    assert answer.status_code == 400
    assert answer.headers["Content-Type"].startswith("application/json")
    assert set(answer.json()) == {"error"}


def test_unknown_paths_and_missing_tokens_answer_in_ollama_shape(
    live_server: LiveServer, raw: httpx.Client
) -> None:
    missing = raw.get("/api/nothing")
    assert missing.status_code == 404 and set(missing.json()) == {"error"}
    anonymous = httpx.get(f"{ollama_host(live_server)}/api/tags")
    assert anonymous.status_code == 401 and set(anonymous.json()) == {"error"}


def test_a_scoped_token_needs_its_scope(live_server: LiveServer) -> None:
    reader = ollama.Client(
        host=ollama_host(live_server), headers={"Authorization": f"Bearer {READER_TOKEN}"}
    )
    assert MODEL in {model.model for model in reader.list().models}
    with pytest.raises(ollama.ResponseError) as caught:
        reader.generate(MODEL, "Hi")
    assert caught.value.status_code == 403


def test_a_stream_is_ndjson_ending_with_done(raw: httpx.Client) -> None:
    body = {"model": MODEL, "prompt": "Hi", "options": {"num_predict": 4}}
    with raw.stream("POST", "/api/generate", json=body) as answer:
        assert answer.headers["Content-Type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in answer.iter_lines() if line]
    assert lines[-1]["done"] is True
    assert all(line["done"] is False for line in lines[:-1])
