"""Ollama's requests as response requests: keep_alive, options, format, and tool calls
without ids paired with the tool messages that answer them."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.items import FunctionCall, FunctionCallOutput, InputMessage
from lmsp_jupyter.protocol.models import EXTENSION_KEY
from lmsp_jupyter.protocol.ollama import (
    OllamaChatRequest,
    OllamaGenerateRequest,
    chat_request,
    generate_request,
    keep_alive_seconds,
    raw_prompt,
)
from lmsp_jupyter.protocol.requests import JsonSchemaFormat, validate_request


def chat(**fields: Any) -> OllamaChatRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], **fields}
    return validate_request(OllamaChatRequest, body)


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("300ms", 0.3),
        ("-1", -1.0),
        ("-5m", -1.0),
        (3600, 3600.0),
        (0, 0.0),
        ("0", 0.0),
        ("90", 90.0),
        (None, None),
    ],
)
def test_keep_alive_is_seconds(given: Any, seconds: float | None) -> None:
    assert keep_alive_seconds(given) == pytest.approx(seconds)


@pytest.mark.parametrize("given", ["soon", "5 minutes", "m", "", "1e999"])
def test_a_keep_alive_that_is_no_duration_is_refused(given: str) -> None:
    with pytest.raises(LmspError) as caught:
        keep_alive_seconds(given)
    assert (caught.value.code, caught.value.param) == ("invalid_request", "keep_alive")


def test_options_keep_alive_and_format_become_the_response_request() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    request = chat_request(
        chat(
            options={
                "temperature": 0.2,
                "top_k": 5,
                "seed": 7,
                "num_predict": 9,
                "stop": ["\n"],
                "num_ctx": 4096,
                "repeat_penalty": 1.1,
                "presence_penalty": 0.5,
            },
            keep_alive="10m",
            format=schema,
        )
    )
    assert (request.temperature, request.top_k, request.seed) == (0.2, 5, 7)
    assert (request.max_output_tokens, request.stop) == (9, ["\n"])
    assert (request.presence_penalty, request.frequency_penalty) == (0.5, None)
    assert request.extensions == {EXTENSION_KEY: {"keep_alive_seconds": 600.0}}
    assert isinstance(request.response_format, JsonSchemaFormat)
    assert request.response_format.json_schema.schema_ == schema


def test_an_empty_stop_list_stops_nowhere() -> None:
    assert chat_request(chat(options={"stop": []})).stop is None


@pytest.mark.parametrize("num_predict", [-1, -2])
def test_a_negative_num_predict_means_up_to_the_window(num_predict: int) -> None:
    assert chat_request(chat(options={"num_predict": num_predict})).max_output_tokens is None


def test_format_json_is_any_object() -> None:
    request = chat_request(chat(format="json"))
    assert isinstance(request.response_format, JsonSchemaFormat)
    assert request.response_format.json_schema.schema_ == {"type": "object"}


def test_tool_messages_answer_calls_by_id_or_by_name_or_in_order() -> None:
    calls = [
        {"function": {"name": "a", "arguments": {"x": 1}}},
        {"function": {"name": "b", "arguments": {}}},
        {"id": "mine", "function": {"name": "c", "arguments": {}}},
    ]
    request = chat_request(
        chat(
            messages=[
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "", "tool_calls": calls},
                {"role": "tool", "tool_call_id": "mine", "content": "C"},
                {"role": "tool", "tool_name": "b", "content": "B"},
                {"role": "tool", "content": "A"},
            ]
        )
    )
    items = request.input
    made = [item for item in items if isinstance(item, FunctionCall)]
    answers = {item.output: item.call_id for item in items if isinstance(item, FunctionCallOutput)}
    ids = {call.name: call.call_id for call in made}
    assert answers == {"C": "mine", "B": ids["b"], "A": ids["a"]}
    assert made[0].arguments == '{"x": 1}'


def test_generate_is_one_user_turn_after_the_system_prompt() -> None:
    body = {"model": "m", "prompt": "Hi", "system": "Be brief."}
    request = generate_request(validate_request(OllamaGenerateRequest, body))
    assert [
        (item.role, item.text()) for item in request.input if isinstance(item, InputMessage)
    ] == [
        ("system", "Be brief."),
        ("user", "Hi"),
    ]


@pytest.mark.parametrize("fields", [{"template": "{{ .Prompt }}"}, {"images": ["aGk="]}])
def test_what_generate_does_not_serve_is_refused(fields: dict[str, Any]) -> None:
    body = {"model": "m", "prompt": "Hi", **fields}
    with pytest.raises(LmspError) as caught:
        generate_request(validate_request(OllamaGenerateRequest, body))
    assert caught.value.code == "unsupported_capability"


@pytest.mark.parametrize(
    "fields", [{"system": "Be brief."}, {"template": "{{ .Prompt }}"}, {"context": [1, 2]}]
)
def test_raw_mode_refuses_what_ollama_refuses(fields: dict[str, Any]) -> None:
    body = {"model": "m", "prompt": "Hi", "raw": True, **fields}
    with pytest.raises(LmspError) as caught:
        generate_request(validate_request(OllamaGenerateRequest, body))
    assert caught.value.code == "invalid_request"
    assert "raw mode" in str(caught.value.detail)


@pytest.mark.parametrize(
    ("fields", "raw"),
    [
        ({}, None),
        ({"suffix": ""}, None),  # Ollama reads an empty suffix as none
        ({"raw": True}, ("Hi", None)),
        ({"suffix": "end"}, ("Hi", "end")),
        ({"suffix": "end", "system": "Be brief."}, ("Hi", "end")),
        ({"raw": True, "suffix": "end"}, ("Hi", "end")),
    ],
)
def test_raw_and_suffix_send_the_prompt_as_text(
    fields: dict[str, Any], raw: tuple[str, str | None] | None
) -> None:
    request = validate_request(OllamaGenerateRequest, {"model": "m", "prompt": "Hi", **fields})
    assert raw_prompt(request) == raw
    generate_request(request)  # served
