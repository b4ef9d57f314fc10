"""Tests for the Chat Completions translation (LMSP 1.0 section 11.3), no model needed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lmsp_jupyter.protocol.chat import ChatCompletionRequest, as_response_request, chat_param
from lmsp_jupyter.protocol.chat_answers import ChunkTranslator, chat_completion
from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.events import (
    FunctionCallArgumentsDelta,
    OutputItemAdded,
    OutputTextDelta,
    ResponseCompleted,
    ResponseEvent,
    ResponseFailed,
    ResponseIncomplete,
)
from lmsp_jupyter.protocol.items import (
    FunctionCall,
    FunctionCallOutput,
    InputMessage,
    OutputFunctionCall,
    OutputMessage,
    OutputText,
)
from lmsp_jupyter.protocol.requests import JsonSchemaFormat, NamedToolChoice, validate_request
from lmsp_jupyter.protocol.responses import IncompleteDetails, Usage
from lmsp_jupyter.server.sse import sse_frame
from tests.protocol.helpers import RESPONSE, RID

USAGE = Usage(input_tokens=3, output_tokens=2, total_tokens=5)


def chat(**fields: Any) -> ChatCompletionRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], **fields}
    return validate_request(ChatCompletionRequest, body)


def test_messages_become_input_items_in_order() -> None:
    request = as_response_request(
        chat(
            messages=[
                {"role": "developer", "content": "Be brief."},
                {"role": "system", "content": [{"type": "text", "text": "Be kind."}]},
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "Sunny."},
                {"role": "assistant", "content": "It is sunny."},
            ]
        )
    )
    assert request.input == [
        InputMessage(role="system", content="Be brief."),
        InputMessage(role="system", content="Be kind."),
        InputMessage(role="user", content="Weather?"),
        FunctionCall(call_id="call_1", name="f", arguments="{}"),
        FunctionCallOutput(type="function_call_output", call_id="call_1", output="Sunny."),
        InputMessage(role="assistant", content="It is sunny."),
    ]


def test_settings_map_onto_the_response_request() -> None:
    request = as_response_request(
        chat(
            max_tokens=5,
            temperature=0.5,
            top_p=0.9,
            seed=7,
            stop=["\n"],
            tools=[{"type": "function", "function": {"name": "f", "strict": True}}],
            tool_choice={"type": "function", "function": {"name": "f"}},
            parallel_tool_calls=False,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "a", "schema": {"type": "object"}, "strict": True},
            },
        )
    )
    assert (request.max_output_tokens, request.temperature, request.top_p, request.seed) == (
        5,
        0.5,
        0.9,
        7,
    )
    assert request.stop == ["\n"]
    assert request.tool_choice == NamedToolChoice(type="function", name="f")
    assert request.function_tools()[0].name == "f"
    assert request.parallel_tool_calls is False
    assert isinstance(request.response_format, JsonSchemaFormat)
    assert request.response_format.json_schema.schema_ == {"type": "object"}


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert as_response_request(chat(max_tokens=5, max_completion_tokens=3)).max_output_tokens == 3


def test_json_object_is_the_schema_of_any_object() -> None:
    request = as_response_request(chat(response_format={"type": "json_object"}))
    assert isinstance(request.response_format, JsonSchemaFormat)
    assert request.response_format.json_schema.schema_ == {"type": "object"}


@pytest.mark.parametrize("n", [0, 2])
def test_n_other_than_1_is_invalid_request(n: int) -> None:
    with pytest.raises(LmspError) as info:
        as_response_request(chat(n=n))
    assert (info.value.code, info.value.status, info.value.param) == ("invalid_request", 400, "n")


def test_an_image_part_is_unsupported_capability() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    with pytest.raises(LmspError) as info:
        as_response_request(chat(messages=[{"role": "user", "content": [image]}]))
    assert (info.value.code, info.value.param) == (
        "unsupported_capability",
        "messages[0].content[0].type",
    )


def test_a_cache_control_hint_as_litellm_sends_it_is_accepted_and_changes_nothing() -> None:
    hint = {"type": "ephemeral"}
    plain = [
        {"role": "system", "content": [{"type": "text", "text": "Be kind."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
    ]
    hinted = [
        {"role": "system", "content": "Be kind.", "cache_control": hint},
        {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": hint}]},
    ]
    assert (
        as_response_request(chat(messages=hinted)).input
        == as_response_request(chat(messages=plain)).input
    )


def test_an_unknown_field_is_invalid_request() -> None:
    with pytest.raises(LmspError) as info:
        chat(frobnicate=1)
    assert (info.value.code, info.value.param) == ("invalid_request", "frobnicate")


def test_service_params_are_named_as_the_chat_request_names_them() -> None:
    assert chat_param(chat(max_tokens=5), "max_output_tokens") == "max_tokens"
    assert chat_param(chat(max_completion_tokens=5), "max_output_tokens") == "max_completion_tokens"
    assert chat_param(chat(), "input[2].call_id") == "messages"
    assert chat_param(chat(), "response_format") == "response_format"


def test_a_response_becomes_a_chat_completion() -> None:
    response = RESPONSE.model_copy(
        update={
            "status": "completed",
            "usage": USAGE,
            "output": [
                OutputMessage(id="msg_1", content=[OutputText(text="Hi!")]),
                OutputFunctionCall(id="fc_1", call_id="call_1", name="f", arguments="{}"),
            ],
        }
    )
    completion = json.loads(chat_completion(response).model_dump_json())
    assert completion["object"] == "chat.completion"
    assert (completion["id"], completion["created"], completion["model"]) == (
        RID,
        1794200000,
        "m",
    )
    (choice,) = completion["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Hi!"
    assert choice["message"]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]
    assert completion["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "total_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def frames(translator: ChunkTranslator, *data: Any) -> list[str]:
    out = [sse_frame(translator.first())]
    for number, item in enumerate(data, start=1):
        out += [sse_frame(chunk) for chunk in translator.feed(ResponseEvent(number, item))]
    return [frame.decode() for frame in out]


def test_a_stream_is_data_frames_role_first_then_finish_usage_and_done() -> None:
    translator = ChunkTranslator(RESPONSE, include_usage=True)
    sent = frames(
        translator,
        OutputTextDelta(
            response_id=RID, item_id="msg_1", output_index=0, content_index=0, delta="Hi"
        ),
        ResponseIncomplete(
            response_id=RID,
            incomplete_details=IncompleteDetails(reason="max_output_tokens"),
            usage=USAGE,
            response=RESPONSE,
        ),
    )
    assert all(frame.startswith("data: ") and frame.endswith("\n\n") for frame in sent)
    assert sent[-1] == "data: [DONE]\n\n"
    chunks = [json.loads(frame.removeprefix("data: ")) for frame in sent[:-1]]
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [
        {"role": "assistant", "content": ""},
        {"content": "Hi"},
    ]
    assert chunks[2]["choices"][0]["finish_reason"] == "length"
    assert chunks[3]["choices"] == [] and chunks[3]["usage"]["completion_tokens"] == 2
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}


def test_calls_stream_as_tool_call_deltas_and_finish_tool_calls() -> None:
    call = OutputFunctionCall(id="fc_1", call_id="call_1", name="f", arguments="")
    translator = ChunkTranslator(RESPONSE, include_usage=False)
    sent = frames(
        translator,
        OutputItemAdded(response_id=RID, output_index=0, item=call),
        FunctionCallArgumentsDelta(response_id=RID, item_id="fc_1", output_index=0, delta="{}"),
        ResponseCompleted(response_id=RID, usage=USAGE, response=RESPONSE),
    )
    chunks = [json.loads(frame.removeprefix("data: ")) for frame in sent[:-1]]
    assert chunks[1]["choices"][0]["delta"]["tool_calls"] == [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    ]
    assert chunks[2]["choices"][0]["delta"]["tool_calls"] == [
        {"index": 0, "function": {"arguments": "{}"}}
    ]
    assert chunks[3]["choices"][0]["finish_reason"] == "tool_calls"
    assert len(chunks) == 4  # no usage chunk unless asked for


def test_a_failure_is_an_error_frame_then_done() -> None:
    problem = LmspError("generation_failed", "boom").to_problem()
    sent = frames(
        ChunkTranslator(RESPONSE, include_usage=True),
        ResponseFailed(response_id=RID, error=problem, response=RESPONSE),
    )
    error = json.loads(sent[1].removeprefix("data: "))
    assert error["error"]["code"] == "generation_failed"
    assert error["error"]["message"] == "boom"
    assert sent[2] == "data: [DONE]\n\n"
