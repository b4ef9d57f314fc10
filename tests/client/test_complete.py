"""``complete``: OpenAI's Completions through ``LmspClient`` and ``AsyncLmspClient``, compared
with the same requests sent over plain HTTP (the bundled model, at temperature 0)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from lmsp_jupyter.client import AsyncLmspClient, LmspClient, ProblemError, ProtocolViolation
from lmsp_jupyter.client._wire import CompletionReader, completion_model
from lmsp_jupyter.protocol.completions import TextCompletion
from lmsp_jupyter.protocol.models import Model
from tests.conftest import MODEL, LiveServer

PROMPT = "def fibonacci(n):\n"
SUFFIX = "\n    return a\n"
OPTIONS: dict[str, Any] = {"max_tokens": 6, "temperature": 0}


@pytest.fixture
def lmsp(live_server: LiveServer) -> Iterator[LmspClient]:
    with LmspClient(live_server.lmsp, live_server.token) as client:
        yield client


@pytest.fixture
def expected(live_server: LiveServer) -> str:
    """The text the service answers the same request with over plain HTTP."""
    with live_server.client() as http:
        body = {"model": MODEL, "prompt": PROMPT, "suffix": SUFFIX, **OPTIONS}
        text: str = http.post("/completions", json=body).json()["choices"][0]["text"]
        return text


def test_complete_is_the_services_text_completion(lmsp: LmspClient, expected: str) -> None:
    completion = lmsp.complete(PROMPT, suffix=SUFFIX, model=MODEL, **OPTIONS)
    assert isinstance(completion, TextCompletion)
    assert completion.choices[0].text == expected
    assert completion.usage is not None and completion.usage.completion_tokens <= 6


def test_complete_streamed_gives_the_same_text_in_chunks(lmsp: LmspClient, expected: str) -> None:
    chunks = list(lmsp.complete(PROMPT, suffix=SUFFIX, stream=True, **OPTIONS))
    assert all(isinstance(chunk, TextCompletion) for chunk in chunks)
    assert "".join(chunk.choices[0].text for chunk in chunks) == expected
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_complete_without_a_model_takes_one_from_the_listing(lmsp: LmspClient) -> None:
    assert lmsp.complete(PROMPT, **OPTIONS).model == MODEL


def test_a_refused_completion_is_a_problem_error_naming_the_field(lmsp: LmspClient) -> None:
    with pytest.raises(ProblemError) as info:
        lmsp.complete(PROMPT, model=MODEL, n=2)
    assert (info.value.problem.code, info.value.problem.param) == ("invalid_request", "n")
    with pytest.raises(ProblemError) as streamed:
        list(lmsp.complete(PROMPT, model=MODEL, stream=True, echo=True))
    assert streamed.value.problem.param == "echo"


def test_async_complete_gives_the_sync_answer(live_server: LiveServer, expected: str) -> None:
    async def run() -> tuple[str, str]:
        async with AsyncLmspClient(live_server.lmsp, live_server.token) as client:
            whole = await client.complete(PROMPT, suffix=SUFFIX, model=MODEL, **OPTIONS)
            chunks = await client.complete(PROMPT, suffix=SUFFIX, stream=True, **OPTIONS)
            text = "".join([chunk.choices[0].text async for chunk in chunks])
            return whole.choices[0].text, text

    assert asyncio.run(run()) == (expected, expected)


def model(model_id: str, status: str, fim: bool) -> Model:
    capabilities = ["streaming", *(["fim"] if fim else [])]
    return Model.model_validate(
        {
            "id": model_id,
            "owned_by": "local",
            "status": status,
            "capabilities": capabilities,
            "context_length": 2048,
            "size_bytes": None,
        }
    )


def test_the_default_model_is_a_loaded_fim_one_else_the_first_loaded_else_the_first() -> None:
    plain, loaded = model("a", "available", False), model("b", "loaded", False)
    coder, loaded_coder = model("c", "available", True), model("d", "loaded", True)
    assert completion_model([plain, loaded, coder, loaded_coder]) == "d"
    assert completion_model([plain, coder, loaded]) == "b"
    assert completion_model([plain, coder]) == "a"


def test_a_wrong_token_is_a_problem_error(live_server: LiveServer) -> None:
    with LmspClient(live_server.lmsp, "wrong") as client, pytest.raises(ProblemError):
        client.complete(PROMPT, model=MODEL)


def test_a_stream_reader_gives_chunks_until_done_and_raises_an_error_frame() -> None:
    chunk = {
        "id": "r",
        "created": 1,
        "model": MODEL,
        "choices": [{"text": "a", "finish_reason": None}],
    }
    reader = CompletionReader()
    first = reader.feed(f"data: {json.dumps(chunk)}\n\ndata: [DO".encode())
    assert [c.choices[0].text for c in first] == ["a"] and not reader.done
    assert reader.feed(b"NE]\n\n") == [] and reader.done
    problem = {
        "type": "about:blank",
        "title": "Failed",
        "status": 500,
        "code": "generation_failed",
        "detail": "the engine failed",
    }
    with pytest.raises(ProblemError) as info:
        CompletionReader().feed(f"data: {json.dumps({'error': problem})}\n\n".encode())
    assert info.value.problem.code == "generation_failed"
    with pytest.raises(ProtocolViolation):
        CompletionReader().feed(b'data: {"choices": 3}\n\n')
