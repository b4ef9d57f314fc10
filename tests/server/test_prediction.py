"""Predicted outputs and speculation over HTTP with the bundled model: the text is the same with a
prediction, a wrong one or none, usage counts the predicted tokens, bad shapes are 400s."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.conftest import MODEL, LiveServer
from tests.server.helpers import ask, assert_problem

OWN = "x-lmsp-jupyter"
PROMPT = "Three facts about owls:\n1."


@pytest.fixture
def sdk(live_server: LiveServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=live_server.lmsp, api_key=live_server.token, max_retries=0) as client:
        yield client


def chat(sdk: OpenAI, **fields: Any) -> Any:
    return sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=16,
        **fields,
    )


def test_chat_completions_verify_a_prediction_and_count_its_tokens(sdk: OpenAI) -> None:
    plain = chat(sdk)
    answer = plain.choices[0].message.content
    assert answer
    predicted = chat(sdk, prediction={"type": "content", "content": answer})
    parts = [{"type": "text", "text": answer[:5]}, {"type": "text", "text": answer[5:]}]
    in_parts = chat(sdk, prediction={"type": "content", "content": parts})
    wrong = chat(sdk, prediction={"type": "content", "content": "Zebra 4711 marmalade. " * 3})
    assert (
        predicted.choices[0].message.content
        == in_parts.choices[0].message.content
        == wrong.choices[0].message.content
        == answer
    )
    for completion in (plain, predicted, wrong):
        assert completion.usage.completion_tokens == plain.usage.completion_tokens
    details = predicted.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > plain.usage.completion_tokens // 2
    assert details.rejected_prediction_tokens == 0
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0
    assert wrong.usage.completion_tokens_details.accepted_prediction_tokens == 0


def test_a_response_takes_a_prediction_and_may_turn_speculation_off(
    client: httpx.Client,
) -> None:
    first = client.post("/responses", json=ask(PROMPT, 16)).json()
    text = first["output"][0]["content"][0]["text"]
    prediction = {"type": "content", "content": text}
    predicted = client.post(
        "/responses", json=ask(PROMPT, 16, extensions={OWN: {"prediction": prediction}})
    ).json()
    off = client.post(
        "/responses",
        json=ask(PROMPT, 16, extensions={OWN: {"prediction": prediction, "speculation": False}}),
    ).json()
    assert predicted["output"][0]["content"][0]["text"] == text
    assert off["output"][0]["content"][0]["text"] == text
    usage = predicted["usage"]["extensions"][OWN]
    assert usage["accepted_prediction_tokens"] > first["usage"]["output_tokens"] // 2
    assert usage["accepted_draft_tokens"] >= usage["accepted_prediction_tokens"]
    assert off["usage"]["extensions"][OWN] == {
        "accepted_draft_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    }


@pytest.mark.parametrize(
    ("prediction", "param"),
    [
        ({"type": "text", "content": "x"}, "prediction.type"),
        ({"type": "content"}, "prediction"),  # "content" is its tag's value too
        ({"type": "content", "content": 5}, "prediction.content"),
        ({"type": "content", "content": [{"type": "image_url"}]}, "prediction.content[0].type"),
        ("x", "prediction"),
    ],
)
def test_a_bad_prediction_is_a_400_naming_it(
    client: httpx.Client, prediction: Any, param: str
) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
        "prediction": prediction,
    }
    problem = assert_problem(client.post("/chat/completions", json=body), 400, "invalid_request")
    assert problem["param"] == param
    own = ask(extensions={OWN: {"prediction": prediction}})
    problem = assert_problem(client.post("/responses", json=own), 400, "invalid_request")
    assert problem["param"] == f"extensions.{OWN}.{param}"


def test_speculation_must_be_a_boolean(client: httpx.Client) -> None:
    body = ask(extensions={OWN: {"speculation": "no"}})
    problem = assert_problem(client.post("/responses", json=body), 400, "invalid_request")
    assert problem["param"] == f"extensions.{OWN}.speculation"
