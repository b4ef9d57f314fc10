"""OpenAI's Completions (``POST /lmsp/v1/completions``, LMSP 1.0 section 11.5) on the bundled
model, and fill-in-the-middle on a copy of it whose GGUF names FIM tokens.

The bundled model is a base model: these tests compare runs with each other (streamed with
not, with a suffix with without, cut at a stop string with uncut), never with fixed text.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from openai.types import Completion
from traitlets.config import Config

from tests.conftest import MODEL, READER_TOKEN, LiveServer
from tests.helpers import eventually_async
from tests.server.helpers import (
    LEFT_LIMIT,
    assert_problem,
    fim_prompt_lengths,
    leave_mid_stream,
    scripted_engine,
    server_config,
)

PROMPT = "def fibonacci(n):\n"


def complete(**fields: Any) -> dict[str, Any]:
    """A small, deterministic completion request for the bundled model."""
    return {"model": MODEL, "prompt": PROMPT, "temperature": 0, "max_tokens": 6, **fields}


def data_frames(text: str) -> list[str]:
    """The ``data`` of each frame of an OpenAI-style stream (``data`` alone, retry first)."""
    frames = []
    for number, block in enumerate(b for b in text.split("\n\n") if b):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if not line.startswith(":"))
        if number == 0:
            assert fields.pop("retry") == "2000"
        assert set(fields) == {"data"}, block
        frames.append(fields["data"])
    return frames


def streamed(client: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a streamed completion, checked to end with ``[DONE]``."""
    response = client.post("/completions", json={**body, "stream": True})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = data_frames(response.text)
    assert frames[-1] == "[DONE]" and "[DONE]" not in frames[:-1]
    return [json.loads(frame) for frame in frames[:-1]]


# --- shapes ----------------------------------------------------------------------------------


def test_a_completion_is_a_text_completion_with_usage(client: httpx.Client) -> None:
    response = client.post("/completions", json=complete())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "text_completion"
    assert body["model"] == MODEL
    assert isinstance(body["created"], int) and body["id"]
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["logprobs"] is None
    assert isinstance(choice["text"], str)
    usage = body["usage"]
    assert choice["finish_reason"] == ("length" if usage["completion_tokens"] == 6 else "stop")
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_max_tokens_defaults_to_openais_16(client: httpx.Client) -> None:
    body = complete()
    del body["max_tokens"]
    usage = client.post("/completions", json=body).json()["usage"]
    assert usage["completion_tokens"] <= 16


def test_a_prompt_given_as_a_list_of_one_is_that_prompt(client: httpx.Client) -> None:
    alone = client.post("/completions", json=complete()).json()
    listed = client.post("/completions", json=complete(prompt=[PROMPT])).json()
    assert listed["choices"][0]["text"] == alone["choices"][0]["text"]
    assert listed["usage"]["prompt_tokens"] == alone["usage"]["prompt_tokens"]


def test_a_base_models_one_turn_chat_is_its_raw_prompt(client: httpx.Client) -> None:
    # The bundled model has no chat template (test_model_kinds.py has a chat model's prompt).
    raw = client.post("/completions", json=complete()).json()
    chat = client.post(
        "/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 1},
    ).json()
    assert raw["usage"]["prompt_tokens"] == chat["usage"]["prompt_tokens"]


def test_streamed_chunks_make_the_same_text_and_end_with_usage_when_asked(
    client: httpx.Client,
) -> None:
    whole = client.post("/completions", json=complete()).json()
    chunks = streamed(client, complete(stream_options={"include_usage": True}))
    assert all(chunk["object"] == "text_completion" for chunk in chunks)
    assert {chunk["id"] for chunk in chunks} == {chunks[0]["id"]}
    *texts, usage_chunk = chunks
    assert "".join(c["choices"][0]["text"] for c in texts) == whole["choices"][0]["text"]
    assert [c["choices"][0]["finish_reason"] for c in texts[:-1]] == [None] * (len(texts) - 1)
    assert texts[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert usage_chunk["choices"] == []
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert [usage_chunk["usage"][n] for n in counts] == [whole["usage"][n] for n in counts]
    assert all("usage" not in chunk for chunk in texts)


def test_a_stream_without_include_usage_has_no_usage(client: httpx.Client) -> None:
    chunks = streamed(client, complete())
    assert chunks and all(chunk["choices"] and "usage" not in chunk for chunk in chunks)


def test_a_stop_string_cuts_the_text_before_it(client: httpx.Client) -> None:
    uncut = client.post("/completions", json=complete(max_tokens=16)).json()["choices"][0]
    text = uncut["text"]
    stop = next((text[i : i + 2] for i in range(1, len(text) - 1) if text[i : i + 2].strip()), None)
    if stop is None:
        pytest.skip(f"the model's text {text!r} has no two characters to stop at")
    cut = client.post("/completions", json=complete(max_tokens=16, stop=[stop])).json()
    assert cut["choices"][0]["text"] == text[: text.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"
    streamed_cut = streamed(client, complete(max_tokens=16, stop=stop))
    assert "".join(c["choices"][0]["text"] for c in streamed_cut) == cut["choices"][0]["text"]


def test_without_fim_tokens_the_suffix_is_left_out(client: httpx.Client) -> None:
    model = client.get(f"/models/{MODEL}").json()
    assert "fim" not in model["capabilities"]
    alone = client.post("/completions", json=complete()).json()
    with_suffix = client.post("/completions", json=complete(suffix="\n    return a\n")).json()
    assert with_suffix["choices"][0]["text"] == alone["choices"][0]["text"]
    assert with_suffix["usage"]["prompt_tokens"] == alone["usage"]["prompt_tokens"]


# --- bad input, scopes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        ({"best_of": 3}, "best_of"),
        ({"echo": True}, "echo"),
        ({"logprobs": 6}, "logprobs"),
        ({"logprobs": -1}, "logprobs"),
        ({"frequency_penalty": 2.5}, "frequency_penalty"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 10**6}, "max_tokens"),
        ({"temperature": 3}, "temperature"),
        ({"stop": ["a"] * 5}, "stop"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"suffix": 5}, "suffix"),
        ({"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
        ({"tools": []}, "tools"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    client: httpx.Client, fields: dict[str, Any], param: str
) -> None:
    response = client.post("/completions", json=complete(**fields))
    code = "context_length_exceeded" if fields.get("max_tokens") == 10**6 else "invalid_request"
    problem = assert_problem(response, 400, code)
    assert problem["param"] == param


def test_a_prediction_is_verified_and_never_changes_the_text(client: httpx.Client) -> None:
    body = complete(max_tokens=24, temperature=0)
    plain = client.post("/completions", json=body).json()
    text = plain["choices"][0]["text"]
    predicted = client.post(
        "/completions", json={**body, "prediction": {"type": "content", "content": text}}
    ).json()
    wrong = {"type": "content", "content": "Zebra quantum 4711 marmalade " * 4}
    mispredicted = client.post("/completions", json={**body, "prediction": wrong}).json()
    assert predicted["choices"][0]["text"] == mispredicted["choices"][0]["text"] == text
    details = predicted["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] > 0
    assert mispredicted["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0


@pytest.mark.parametrize("prediction", [{"type": "image", "content": "x"}, {"content": 5}, "text"])
def test_a_bad_prediction_is_a_400_naming_it(client: httpx.Client, prediction: object) -> None:
    response = client.post("/completions", json=complete(prediction=prediction))
    problem = assert_problem(response, 400, "invalid_request")
    assert str(problem["param"]).startswith("prediction")


def test_a_missing_prompt_is_named(client: httpx.Client) -> None:
    problem = assert_problem(
        client.post("/completions", json={"model": MODEL}), 400, "invalid_request"
    )
    assert problem["param"] == "prompt"


def test_an_unknown_model_is_model_not_found(client: httpx.Client) -> None:
    response = client.post("/completions", json=complete(model="no/such-model"))
    assert_problem(response, 404, "model_not_found")


def test_completions_need_the_responses_write_scope(live_server: LiveServer) -> None:
    with live_server.client(token=READER_TOKEN) as reader:
        assert_problem(reader.post("/completions", json=complete()), 403, "insufficient_scope")


# --- the openai SDK --------------------------------------------------------------------------


@pytest.fixture
def sdk(live_server: LiveServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=live_server.lmsp, api_key=live_server.token, max_retries=0) as client:
        yield client


def test_the_openai_sdk_creates_and_streams_completions(sdk: OpenAI) -> None:
    completion = sdk.completions.create(
        model=MODEL, prompt=PROMPT, temperature=0, max_tokens=6, suffix="\n    return a\n", seed=1
    )
    assert isinstance(completion, Completion)
    assert completion.object == "text_completion"
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    stream = sdk.completions.create(
        model=MODEL,
        prompt=PROMPT,
        temperature=0,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    assert text == completion.choices[0].text
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == completion.usage.completion_tokens


# --- in-process: a left stream frees its sequence; fill in the middle -------------------------


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest, fim_model_path: Path) -> Config:
    """The in-process server, with the FIM copy of the bundled model in a model directory."""
    return server_config(
        request, sse_keepalive_seconds=0.05, model_dirs=[str(fim_model_path.parent)]
    )


async def test_a_client_that_leaves_mid_stream_frees_the_sequence(
    lmsp: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = complete(max_tokens=LEFT_LIMIT, stream=True)
    await leave_mid_stream(
        lmsp, monkeypatch, "/completions", body, lambda line: line.startswith("data: {")
    )
    after = await lmsp.post("/completions", json=complete(max_tokens=2))
    assert after.json()["usage"]["completion_tokens"] == 2


async def test_a_model_with_fim_tokens_fills_in_the_middle(
    lmsp: httpx.AsyncClient, fim_model_path: Path
) -> None:
    model = (await lmsp.get("/models/model")).json()
    assert "fim" in model["capabilities"]
    prefix, suffix = PROMPT, "\n    return a\n"
    body = complete(model="model", prompt=prefix, suffix=suffix, max_tokens=4)
    filled = (await lmsp.post("/completions", json=body)).json()
    filled_length, prefix_length = fim_prompt_lengths(fim_model_path, prefix, suffix)
    assert filled["usage"]["prompt_tokens"] == filled_length
    del body["suffix"]
    continued = (await lmsp.post("/completions", json=body)).json()
    assert continued["usage"]["prompt_tokens"] == prefix_length


@pytest.mark.script({"deltas": ["x"] * 400, "delay": 0.05, "slots": 1})
async def test_a_completion_goes_before_the_answers_waiting_for_the_model(
    lmsp: httpx.AsyncClient, jp_serverapp: Any
) -> None:
    request = {"model": MODEL, "input": "Tell a long story."}
    running = (await lmsp.post("/tasks", json={"type": "response", "request": request})).json()
    waiting = (await lmsp.post("/tasks", json={"type": "response", "request": request})).json()
    assert waiting["queue_position"] == 1
    completion = asyncio.ensure_future(lmsp.post("/completions", json=complete()))

    async def behind_the_completion() -> bool:
        return bool((await lmsp.get(f"/tasks/{waiting['id']}")).json()["queue_position"] == 2)

    await eventually_async(behind_the_completion, interval=0.05, what="the completion ahead")
    await lmsp.post(f"/tasks/{running['id']}/cancel")
    assert (await completion).status_code == 200
    order = [prompt.raw for prompt in scripted_engine(jp_serverapp).generated]
    assert order[:2] == [False, True]  # the running answer, then the completion
