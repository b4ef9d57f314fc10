"""Tests for what OpenAI's clients send to ``POST /responses`` (LMSP 1.0 section 11.1)."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.items import (
    FunctionCall,
    FunctionCallOutput,
    InputMessage,
    ItemReference,
    OutputText,
)
from lmsp_jupyter.protocol.requests import (
    AllowedToolsChoice,
    JsonSchemaFormat,
    JsonSchemaSpec,
    TextFormat,
    parse_response_request,
)

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
TOOL = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}


def request(**fields: Any) -> dict[str, Any]:
    """A valid request body, with ``fields`` added or replaced."""
    return {"model": "gemma3:270m-q4_k_m", "input": "Hi", **fields}


def refused(data: dict[str, Any]) -> LmspError:
    with pytest.raises(LmspError) as info:
        parse_response_request(data)
    return info.value


def test_a_message_without_type_is_a_message() -> None:
    parsed = parse_response_request(request(input=[{"role": "user", "content": "Hi"}]))
    assert parsed.input == [InputMessage(role="user", content="Hi")]


def test_role_developer_is_a_system_message() -> None:
    parsed = parse_response_request(
        request(
            input=[{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        )
    )
    assert [item.role for item in parsed.input if isinstance(item, InputMessage)] == [
        "system",
        "user",
    ]


def test_an_unknown_role_is_still_invalid_request() -> None:
    error = refused(request(input=[{"role": "wizard", "content": "Hi"}]))
    assert (error.code, error.param) == ("invalid_request", "input[0].role")


def test_items_as_the_sdks_send_them_back_are_accepted() -> None:
    parsed = parse_response_request(
        request(
            input=[
                {"role": "user", "content": "Weather?"},
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Let me see.", "annotations": []}],
                },
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "f",
                    "arguments": "{}",
                    "status": "completed",
                },
                {
                    "type": "function_call_output",
                    "call_id": "call_1",
                    "output": [
                        {"type": "input_text", "text": "sun"},
                        {"type": "input_text", "text": "ny"},
                    ],
                },
                {"type": "item_reference", "id": "msg_0"},
            ]
        )
    )
    _, assistant, call, output, reference = parsed.input
    assert isinstance(assistant, InputMessage) and assistant.content == [
        OutputText(text="Let me see.")
    ]
    assert isinstance(call, FunctionCall) and call.status == "completed"
    assert output == FunctionCallOutput(
        type="function_call_output", call_id="call_1", output="sunny"
    )
    assert reference == ItemReference(type="item_reference", id="msg_0")


def test_instructions_and_ignored_fields_are_accepted() -> None:
    parsed = parse_response_request(
        request(
            instructions="Be brief.",
            user="u",
            safety_identifier="s",
            prompt_cache_key="k",
            service_tier="auto",
            reasoning={"effort": "low"},
            include=["reasoning.encrypted_content"],
            stream_options={"include_obfuscation": False},
            truncation="disabled",
            background=False,
            parallel_tool_calls=False,
        )
    )
    assert (parsed.instructions, parsed.parallel_tool_calls) == ("Be brief.", False)


def test_truncation_auto_is_invalid_request() -> None:
    error = refused(request(truncation="auto"))
    assert (error.code, error.status, error.param) == ("invalid_request", 400, "truncation")


def test_any_other_unknown_field_is_still_invalid_request() -> None:
    error = refused(request(frobnicate=True))
    assert (error.code, error.param) == ("invalid_request", "frobnicate")


def test_text_format_json_schema_is_response_format() -> None:
    parsed = parse_response_request(
        request(
            text={"format": {"type": "json_schema", "name": "a", "schema": SCHEMA, "strict": True}}
        )
    )
    assert parsed.response_format == JsonSchemaFormat(
        type="json_schema", json_schema=JsonSchemaSpec(name="a", schema_=SCHEMA, strict=True)
    )


def test_text_format_json_object_is_the_schema_of_any_object() -> None:
    parsed = parse_response_request(request(text={"format": {"type": "json_object"}}))
    assert isinstance(parsed.response_format, JsonSchemaFormat)
    assert parsed.response_format.json_schema.schema_ == {"type": "object"}


def test_text_format_text_is_plain_text() -> None:
    parsed = parse_response_request(request(text={"format": {"type": "text"}, "verbosity": "low"}))
    assert parsed.response_format == TextFormat(type="text")


def test_text_format_and_the_same_response_format_are_accepted() -> None:
    parsed = parse_response_request(
        request(text={"format": {"type": "text"}}, response_format={"type": "text"})
    )
    assert parsed.response_format == TextFormat(type="text")


def test_text_format_and_a_different_response_format_are_invalid_request() -> None:
    error = refused(
        request(
            text={"format": {"type": "json_object"}},
            response_format={"type": "text"},
        )
    )
    assert (error.code, error.status, error.param) == ("invalid_request", 400, "text.format")


def test_strict_on_a_function_tool_is_accepted() -> None:
    parsed = parse_response_request(request(tools=[{**TOOL, "strict": True}]))
    assert parsed.function_tools()[0].strict is True


def test_tool_choice_allowed_tools_is_accepted() -> None:
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "f"}],
    }
    parsed = parse_response_request(request(tools=[TOOL], tool_choice=choice))
    assert isinstance(parsed.tool_choice, AllowedToolsChoice)
    assert parsed.tool_choice.mode == "required"


def test_allowed_tools_naming_an_unknown_tool_is_invalid_request() -> None:
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "g"}]}
    error = refused(request(tools=[TOOL], tool_choice=choice))
    assert (error.code, error.param) == ("invalid_request", "tool_choice.tools[0].name")
