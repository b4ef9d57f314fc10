"""Anthropic's Messages requests as response requests, and responses and their events as
Anthropic's messages, stream events, usage and errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lmsp_jupyter.protocol.anthropic import (
    CountTokensRequest,
    MessagesRequest,
    messages_param,
    messages_request,
)
from lmsp_jupyter.protocol.anthropic_answers import (
    AnthropicError,
    MessageStream,
    anthropic_error,
    anthropic_usage,
    message,
)
from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.events import (
    FunctionCallArgumentsDelta,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    ReasoningSummaryTextDelta,
    ResponseCompleted,
    ResponseEvent,
    ResponseFailed,
)
from lmsp_jupyter.protocol.items import (
    FunctionCall,
    FunctionCallOutput,
    InputMessage,
    OutputFunctionCall,
    OutputMessage,
    OutputReasoning,
    OutputText,
    SummaryText,
)
from lmsp_jupyter.protocol.requests import NamedToolChoice, validate_request
from lmsp_jupyter.protocol.responses import InputTokensDetails, Usage
from tests.protocol.helpers import RESPONSE, RID

TOOL = {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}


def body(**fields: Any) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Hi"}],
    } | fields


def translated(**fields: Any) -> Any:
    return messages_request(validate_request(MessagesRequest, body(**fields)), "m")


def refusal(**fields: Any) -> LmspError:
    with pytest.raises(LmspError) as caught:
        translated(**fields)
    return caught.value


def test_the_model_is_the_one_the_name_resolved_to_and_max_tokens_the_output_limit() -> None:
    request = translated(stop_sequences=["\n\n"], temperature=0.5, top_k=5, top_p=0.9)
    assert (request.model, request.max_output_tokens) == ("m", 16)
    assert (request.stop, request.temperature, request.top_k, request.top_p) == (
        ["\n\n"],
        0.5,
        5,
        0.9,
    )


def test_claude_codes_billing_header_block_is_dropped_and_the_rest_is_one_system_message() -> None:
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.37; cch=1f2e;"},
        {"type": "text", "text": "You are a CLI.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Be brief."},
    ]
    first = translated(system=system).input[0]
    assert isinstance(first, InputMessage)
    assert (first.role, first.content) == ("system", "You are a CLI.\n\nBe brief.")


def test_a_billing_header_alone_leaves_no_system_message() -> None:
    system = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1;"}]
    assert translated(system=system).input == [InputMessage(role="user", content="Hi")]


def test_blocks_become_messages_calls_and_outputs_in_order() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "Calling."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"c": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "text", "text": "And?"},
            ],
        },
    ]
    items = translated(messages=messages, tools=[TOOL]).input
    assert items == [
        InputMessage(role="user", content="a\n\nb"),
        InputMessage(role="assistant", content="Calling."),
        FunctionCall(call_id="toolu_1", name="get_weather", arguments=json.dumps({"c": 1})),
        FunctionCallOutput(type="function_call_output", call_id="toolu_1", output="sunny"),
        InputMessage(role="user", content="And?"),
    ]


def test_a_failed_tools_result_says_so_and_its_text_blocks_are_joined() -> None:
    result = {
        "type": "tool_result",
        "tool_use_id": "t",
        "is_error": True,
        "content": [{"type": "text", "text": "no"}, {"type": "text", "text": "network"}],
    }
    messages = [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
        },
        {"role": "user", "content": [result]},
    ]
    output = translated(messages=messages).input[-1]
    assert isinstance(output, FunctionCallOutput)
    assert output.output == "Error: no\n\nnetwork"


@pytest.mark.parametrize(
    ("block", "what"),
    [
        (
            {"type": "image", "source": {"type": "base64", "data": "", "media_type": "image/png"}},
            "images",
        ),
        ({"type": "document", "source": {"type": "base64", "data": ""}}, "documents"),
    ],
)
def test_images_and_documents_are_refused_naming_the_block(
    block: dict[str, Any], what: str
) -> None:
    error = refusal(messages=[{"role": "user", "content": [{"type": "text", "text": "x"}, block]}])
    assert error.code == "unsupported_capability"
    assert error.param == "messages[0].content[1].type"
    assert error.detail is not None and error.detail.startswith(what)


def test_an_unknown_block_is_an_invalid_request_naming_its_type() -> None:
    with pytest.raises(LmspError) as caught:
        validate_request(
            MessagesRequest, body(messages=[{"role": "user", "content": [{"type": "video"}]}])
        )
    assert (caught.value.code, caught.value.param) == (
        "invalid_request",
        "messages[0].content[0].type",
    )


def test_tool_use_in_a_user_message_is_refused() -> None:
    block = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    error = refusal(messages=[{"role": "user", "content": [block]}])
    assert (error.code, error.param) == ("invalid_request", "messages[0].content[0]")


@pytest.mark.parametrize(
    ("choice", "expected", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "any"}, "required", None),
        ({"type": "none"}, "none", None),
        (
            {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            NamedToolChoice(type="function", name="get_weather"),
            False,
        ),
    ],
)
def test_tool_choice_is_lmsps(choice: dict[str, Any], expected: Any, parallel: bool | None) -> None:
    request = translated(tools=[TOOL], tool_choice=choice)
    assert (request.tool_choice, request.parallel_tool_calls) == (expected, parallel)
    assert request.tools is not None and request.tools[0].parameters == TOOL["input_schema"]


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_a_forced_call_of_a_tool_not_offered_is_refused(choice: dict[str, Any]) -> None:
    assert refusal(tool_choice=choice).code == "invalid_request"


def test_more_than_four_stop_sequences_are_refused() -> None:
    with pytest.raises(LmspError) as caught:
        validate_request(MessagesRequest, body(stop_sequences=list("abcde")))
    assert caught.value.param == "stop_sequences"


def test_fields_of_the_response_request_are_named_as_anthropic_names_them() -> None:
    given = ("max_output_tokens", "stop", "input[3]", "tools", "tools[2].parameters")
    assert [messages_param(param) for param in given] == [
        "max_tokens",
        "stop_sequences",
        "messages",
        "tools",
        "tools[2].input_schema",
    ]


def test_unknown_fields_and_betas_additions_are_ignored() -> None:
    request = translated(context_management={"edits": []}, output_config={"effort": "low"})
    assert request.model == "m"


def test_count_tokens_asks_for_nothing_to_generate() -> None:
    counted = validate_request(CountTokensRequest, body())
    assert messages_request(counted, "m").max_output_tokens is None


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (400, "invalid_request", (400, "invalid_request_error")),
        (400, "context_length_exceeded", (400, "invalid_request_error")),
        (401, "unauthorized", (401, "authentication_error")),
        (403, "insufficient_scope", (403, "permission_error")),
        (404, "model_not_found", (404, "not_found_error")),
        (413, "payload_too_large", (413, "request_too_large")),
        (415, "unsupported_media_type", (415, "invalid_request_error")),
        (429, "rate_limited", (429, "rate_limit_error")),
        (503, "overloaded", (529, "overloaded_error")),
        (503, "engine_unavailable", (529, "overloaded_error")),
        (409, "model_busy", (529, "overloaded_error")),
        (500, "generation_failed", (500, "api_error")),
    ],
)
def test_errors_have_anthropics_type_and_status(
    status: int, code: str, expected: tuple[int, str]
) -> None:
    answered, error = anthropic_error(status, code, "why")
    assert (answered, error.error.type) == expected
    assert error.model_dump() == {"type": "error", "error": {"type": expected[1], "message": "why"}}


def usage(cached: int = 0) -> Usage:
    return Usage(
        input_tokens=10,
        output_tokens=3,
        total_tokens=13,
        input_tokens_details=InputTokensDetails(cached_tokens=cached),
    )


def test_input_tokens_are_those_not_read_from_the_cache() -> None:
    assert anthropic_usage(usage(cached=7)).model_dump() == {
        "input_tokens": 3,
        "output_tokens": 3,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 7,
    }


REASONING = OutputReasoning(id="rs_1", summary=[SummaryText(text="hm")])
TEXT = OutputMessage(id="msg_1", content=[OutputText(text="Hello")])
CALL = OutputFunctionCall(id="fc_1", call_id="call_1", name="f", arguments='{"a": 1}')


def final(*items: Any, status: str = "completed") -> Any:
    return RESPONSE.model_copy(update={"status": status, "output": list(items), "usage": usage()})


@pytest.mark.parametrize("thinking", [True, False])
def test_a_whole_message_shows_reasoning_only_with_thinking(thinking: bool) -> None:
    answer = message(final(REASONING, TEXT, CALL), "claude-x", thinking=thinking)
    content = [block.model_dump() for block in answer.content]
    shown = [{"type": "thinking", "thinking": "hm", "signature": ""}] if thinking else []
    assert content == [
        *shown,
        {"type": "text", "text": "Hello"},
        {"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}},
    ]
    assert (answer.model, answer.stop_reason, answer.id) == ("claude-x", "tool_use", RID)


@pytest.mark.parametrize(
    ("status", "reason"), [("completed", "end_turn"), ("incomplete", "max_tokens")]
)
def test_the_stop_reason_follows_the_status(status: str, reason: str) -> None:
    assert message(final(TEXT, status=status), "m", thinking=False).stop_reason == reason


def events(*data: Any) -> list[ResponseEvent]:
    return [ResponseEvent(id=number, data=item) for number, item in enumerate(data, 1)]


def test_a_stream_is_anthropics_event_sequence() -> None:
    stream = MessageStream(RESPONSE, "claude-x", thinking=False)
    opened = [event.model_dump() for event in stream.first(12)]
    assert [event["type"] for event in opened] == ["message_start", "ping"]
    assert opened[0]["message"]["usage"]["input_tokens"] == 12
    assert opened[0]["message"]["content"] == []
    sequence = events(
        OutputItemAdded(response_id=RID, output_index=0, item=REASONING),
        ReasoningSummaryTextDelta(
            response_id=RID, item_id="rs_1", output_index=0, summary_index=0, delta="hm"
        ),
        OutputItemDone(response_id=RID, output_index=0, item=REASONING),
        OutputItemAdded(response_id=RID, output_index=1, item=TEXT),
        OutputTextDelta(
            response_id=RID, item_id="msg_1", output_index=1, content_index=0, delta="Hi"
        ),
        OutputItemDone(response_id=RID, output_index=1, item=TEXT),
        OutputItemAdded(response_id=RID, output_index=2, item=CALL),
        FunctionCallArgumentsDelta(response_id=RID, item_id="fc_1", output_index=2, delta='{"a":'),
        OutputItemDone(response_id=RID, output_index=2, item=CALL),
        ResponseCompleted(response_id=RID, usage=usage(), response=final(TEXT, CALL)),
    )
    sent = [answer.model_dump() for event in sequence for answer in stream.feed(event)]
    assert sent == [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "call_1", "name": "f", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"a":'},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": anthropic_usage(usage()).model_dump(),
        },
        {"type": "message_stop"},
    ]


def test_a_stream_with_thinking_has_its_thinking_block_first() -> None:
    stream = MessageStream(RESPONSE, "m", thinking=True)
    sequence = events(
        OutputItemAdded(response_id=RID, output_index=0, item=REASONING),
        ReasoningSummaryTextDelta(
            response_id=RID, item_id="rs_1", output_index=0, summary_index=0, delta="hm"
        ),
    )
    sent = [answer.model_dump() for event in sequence for answer in stream.feed(event)]
    assert sent[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert sent[1]["delta"] == {"type": "thinking_delta", "thinking": "hm"}


def test_a_failure_mid_stream_is_an_error_event() -> None:
    problem = LmspError("generation_failed", "the engine stopped").to_problem()
    failed = ResponseFailed(response_id=RID, error=problem, response=RESPONSE)
    (sent,) = MessageStream(RESPONSE, "m", thinking=False).feed(events(failed)[0])
    assert sent == AnthropicError.model_validate(
        {"type": "error", "error": {"type": "api_error", "message": "the engine stopped"}}
    )


def test_a_leading_system_message_joins_the_system_prompt_a_later_one_is_the_users() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": [{"type": "text", "text": "Today is Monday."}]},
        {"role": "user", "content": "Day?"},
    ]
    assert translated(system="You help.", messages=messages).input == [
        InputMessage(role="system", content="You help.\n\nBe brief."),
        InputMessage(role="user", content="Hi\n\nToday is Monday.\n\nDay?"),
    ]


def test_a_system_message_holds_text_only() -> None:
    block = {"type": "tool_result", "tool_use_id": "t", "content": "x"}
    error = refusal(messages=[{"role": "system", "content": [block]}])
    assert (error.code, error.param) == ("invalid_request", "messages[0].content[0]")


@pytest.mark.parametrize(
    ("thinking", "shown"),
    [
        (None, False),
        ({"type": "disabled"}, False),
        ({"type": "enabled", "budget_tokens": 2048}, True),
        ({"type": "adaptive"}, True),
        ({"type": "adaptive", "display": "omitted"}, False),
    ],
)
def test_thinking_is_shown_when_enabled_and_not_omitted(
    thinking: dict[str, Any] | None, shown: bool
) -> None:
    assert validate_request(MessagesRequest, body(thinking=thinking)).shows_thinking is shown


def test_an_errors_message_names_the_field_first_as_anthropics_do() -> None:
    _, error = anthropic_error(
        400, "invalid_request", "maxLength is over 10000", "tools[2].input_schema"
    )
    assert error.error.message == "tools[2].input_schema: maxLength is over 10000"
    _, same = anthropic_error(400, "invalid_request", "model: x is unknown", "model")
    assert same.error.message == "model: x is unknown"
