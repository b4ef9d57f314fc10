"""Penalties and token logprobs through the official ``openai`` Python SDK, on the live server
and the bundled model (section 11): the SDK parses them (Completions' legacy shape too),
streamed equals not streamed, Chat Completions and Responses agree, bad values are 400s
naming the field. Nothing here compares
the model's text with a fixed string."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionTokenLogprob
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from tests.compat.test_openai_python import sdk
from tests.conftest import MODEL

__all__ = ["sdk"]

PROMPT = "Count: one, two, three,"
LOGPROBS = "message.output_text.logprobs"


def chat(sdk: OpenAI, **fields: Any) -> Any:
    return sdk.chat.completions.create(
        **{
            "model": MODEL,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 8,
            "temperature": 0,
            **fields,
        }
    )


def summary(entries: list[Any]) -> list[tuple[str, float, list[tuple[str, float]]]]:
    """What two lists of logprobs must agree on, whichever API gave them."""
    return [
        (e.token, e.logprob, [(t.token, t.logprob) for t in e.top_logprobs or []]) for e in entries
    ]


def test_chat_completion_logprobs_parse_and_describe_the_greedy_answer(sdk: OpenAI) -> None:
    completion = chat(sdk, logprobs=True, top_logprobs=3)
    (choice,) = completion.choices
    assert choice.logprobs is not None and choice.logprobs.content is not None
    content = choice.logprobs.content
    assert all(isinstance(entry, ChatCompletionTokenLogprob) for entry in content)
    assert completion.usage is not None and len(content) == completion.usage.completion_tokens
    assert bytes(b for entry in content for b in entry.bytes or []).decode() == (
        choice.message.content
    )
    for entry in content:
        top = entry.top_logprobs
        assert len(top) == 3
        assert (top[0].token, top[0].logprob) == (entry.token, entry.logprob)
        assert all(t.logprob <= 0 for t in top)
        assert [t.logprob for t in top] == sorted((t.logprob for t in top), reverse=True)
    assert chat(sdk).choices[0].logprobs is None  # not asked for: none


def test_streamed_chat_logprobs_equal_the_unstreamed_ones(sdk: OpenAI) -> None:
    whole = chat(sdk, logprobs=True, top_logprobs=2).choices[0].logprobs.content
    chunks = list(chat(sdk, logprobs=True, top_logprobs=2, stream=True))
    streamed = [
        entry
        for chunk in chunks
        for choice in chunk.choices
        if choice.logprobs is not None
        for entry in choice.logprobs.content or []
    ]
    assert streamed and summary(streamed) == summary(whole)


def test_responses_logprobs_parse_stream_and_match_chat(sdk: OpenAI) -> None:
    ask: Any = {
        "model": MODEL,
        "input": [{"role": "user", "content": PROMPT}],
        "max_output_tokens": 8,
        "temperature": 0,
        "include": [LOGPROBS],
        "top_logprobs": 2,
    }
    response = sdk.responses.create(**ask)
    (message,) = response.output
    assert isinstance(message, ResponseOutputMessage)
    (part,) = message.content
    assert isinstance(part, ResponseOutputText) and part.logprobs
    assert part.logprobs[0].top_logprobs[0].token == part.logprobs[0].token
    chat_logprobs = chat(sdk, logprobs=True, top_logprobs=2).choices[0].logprobs.content
    assert summary(part.logprobs) == summary(chat_logprobs)
    deltas = [
        entry
        for event in sdk.responses.create(**ask, stream=True)
        if event.type == "response.output_text.delta"
        for entry in event.logprobs or []
    ]
    assert summary(deltas) == summary(part.logprobs)
    plain = sdk.responses.create(**{**ask, "include": None})
    assert isinstance(plain.output[0], ResponseOutputMessage)
    plain_part = plain.output[0].content[0]
    assert isinstance(plain_part, ResponseOutputText) and not plain_part.logprobs


def test_penalties_reach_the_model_alike_on_both_apis(sdk: OpenAI) -> None:
    fields = {"frequency_penalty": 2.0, "presence_penalty": 1.0, "max_tokens": 24}
    plain = chat(sdk, max_tokens=24).choices[0].message.content
    penalized = chat(sdk, **fields).choices[0].message.content
    response = sdk.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": PROMPT}],
        max_output_tokens=24,
        temperature=0,
        extra_body={"frequency_penalty": 2.0, "presence_penalty": 1.0},
    )
    assert penalized != plain
    assert response.output_text == penalized


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"frequency_penalty": 2.5}, "frequency_penalty"),
        ({"presence_penalty": -3}, "presence_penalty"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
    ],
)
def test_chat_values_out_of_range_are_bad_requests(
    sdk: OpenAI, fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        chat(sdk, **fields)
    assert (info.value.code, info.value.param) == ("invalid_request", param)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"frequency_penalty": -2.5}, "frequency_penalty"),
        ({"presence_penalty": 2.1}, "presence_penalty"),
        ({"top_logprobs": -1}, "top_logprobs"),
    ],
)
def test_responses_values_out_of_range_are_bad_requests(
    sdk: OpenAI, fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model=MODEL, input="Hi", max_output_tokens=2, extra_body=fields)
    assert (info.value.code, info.value.param) == ("invalid_request", param)


def complete(sdk: OpenAI, **fields: Any) -> Any:
    return sdk.completions.create(
        **{"model": MODEL, "prompt": PROMPT, "max_tokens": 8, "temperature": 0, **fields}
    )


def test_completion_logprobs_come_in_the_legacy_shape(sdk: OpenAI) -> None:
    completion = complete(sdk, logprobs=2)
    (choice,) = completion.choices
    logprobs = choice.logprobs
    assert logprobs is not None and logprobs.tokens and logprobs.token_logprobs
    assert logprobs.top_logprobs is not None and logprobs.text_offset is not None
    assert completion.usage is not None
    assert len(logprobs.tokens) == completion.usage.completion_tokens
    assert len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == len(logprobs.tokens)
    assert "".join(logprobs.tokens) == choice.text
    assert logprobs.text_offset[0] == len(PROMPT)
    assert all(value <= 0 for value in logprobs.token_logprobs)
    for token, value, top in zip(
        logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs, strict=True
    ):
        assert 1 <= len(top) <= 2 and all(v <= 0 for v in top.values())
        assert next(iter(top.items())) == (token, value)  # the greedy token is the most likely
    assert complete(sdk).choices[0].logprobs is None  # not asked for: none


def test_streamed_completion_logprobs_equal_the_unstreamed_ones(sdk: OpenAI) -> None:
    whole = complete(sdk, logprobs=3).choices[0].logprobs
    streamed: dict[str, list[Any]] = {
        "tokens": [],
        "token_logprobs": [],
        "top_logprobs": [],
        "text_offset": [],
    }
    for chunk in complete(sdk, logprobs=3, stream=True):
        for choice in chunk.choices:
            if choice.logprobs is not None:
                for key, values in streamed.items():
                    values.extend(getattr(choice.logprobs, key))
    assert streamed["tokens"] and streamed == whole.model_dump()


def test_penalties_reach_the_model_on_completions(sdk: OpenAI) -> None:
    penalized = complete(sdk, max_tokens=24, frequency_penalty=2.0, presence_penalty=1.0)
    assert penalized.choices[0].text != complete(sdk, max_tokens=24).choices[0].text


@pytest.mark.parametrize("value", [6, -1])
def test_completion_logprobs_out_of_range_are_bad_requests(sdk: OpenAI, value: int) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        complete(sdk, logprobs=value)
    assert (info.value.code, info.value.param) == ("invalid_request", "logprobs")
