"""Tests for the response request: JSON decoding and validation (LMSP 1.0 section 6.1)."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.items import (
    FunctionCall,
    FunctionCallOutput,
    InputMessage,
    InputText,
    OutputText,
    Reasoning,
    SummaryText,
)
from lmsp_jupyter.protocol.requests import (
    NamedToolChoice,
    ResponseRequest,
    parse_json_body,
    parse_response_request,
)


def request(**fields: Any) -> dict[str, Any]:
    """A valid request body, with ``fields`` added or replaced."""
    return {"model": "gemma3:270m-q4_k_m", "input": "Hi", **fields}


def message(*parts: dict[str, Any], role: str = "user") -> dict[str, Any]:
    return {"type": "message", "role": role, "content": list(parts)}


def text(value: Any) -> dict[str, Any]:
    return {"type": "input_text", "text": value}


def refused(data: dict[str, Any]) -> LmspError:
    """The error ``parse_response_request`` raises for ``data``."""
    with pytest.raises(LmspError) as info:
        parse_response_request(data)
    return info.value


def assert_invalid(data: dict[str, Any], param: str) -> None:
    error = refused(data)
    assert (error.code, error.status, error.param) == ("invalid_request", 400, param)


# --- parse_json_body ---------------------------------------------------------------------------


def test_json_object_body_is_decoded() -> None:
    assert parse_json_body(b'{"model": "m", "input": "\xc3\xa9"}') == {"model": "m", "input": "é"}


@pytest.mark.parametrize("body", [b"", b"{", b'{"model": }', b"\xff\xfe", b"{'model': 1}"])
def test_malformed_json_body_is_invalid_request(body: bytes) -> None:
    with pytest.raises(LmspError) as info:
        parse_json_body(body)
    assert (info.value.code, info.value.status, info.value.param) == ("invalid_request", 400, None)
    assert info.value.detail is not None
    assert info.value.detail.startswith("the body is not valid JSON")


@pytest.mark.parametrize("body", [b"[]", b'[{"model": "m"}]', b"null", b'"Hi"', b"42", b"true"])
def test_non_object_json_body_is_invalid_request(body: bytes) -> None:
    with pytest.raises(LmspError) as info:
        parse_json_body(body)
    assert (info.value.code, info.value.status, info.value.param) == ("invalid_request", 400, None)
    assert info.value.detail == "the body must be a JSON object"


# --- input shapes ------------------------------------------------------------------------------


def test_bare_string_input_is_one_user_message_with_one_input_text_part() -> None:
    parsed = parse_response_request(request(input="Hello there"))
    assert parsed.input == [
        InputMessage(role="user", content=[InputText(type="input_text", text="Hello there")])
    ]
    assert len(parsed.input) == 1
    item = parsed.input[0]
    assert isinstance(item, InputMessage)
    assert item.type == "message"
    assert item.role == "user"
    assert isinstance(item.content, list)
    assert len(item.content) == 1


def test_message_content_may_be_a_plain_string() -> None:
    parsed = parse_response_request(
        request(input=[{"type": "message", "role": "system", "content": "Be brief."}])
    )
    item = parsed.input[0]
    assert isinstance(item, InputMessage)
    assert item.role == "system"
    assert item.content == "Be brief."
    assert item.text() == "Be brief."


def test_message_text_joins_its_parts() -> None:
    parsed = parse_response_request(request(input=[message(text("Hel"), text("lo"))]))
    item = parsed.input[0]
    assert isinstance(item, InputMessage)
    assert item.text() == "Hello"


def test_assistant_message_may_carry_output_text_parts() -> None:
    parsed = parse_response_request(
        request(input=[message({"type": "output_text", "text": "Earlier"}, role="assistant")])
    )
    item = parsed.input[0]
    assert isinstance(item, InputMessage)
    assert item.content == [OutputText(text="Earlier")]


def test_defaults_of_optional_fields() -> None:
    parsed = parse_response_request(request())
    assert parsed.stream is False
    assert parsed.store is False
    assert parsed.max_output_tokens is None
    assert parsed.temperature is None
    assert parsed.response_format is None
    assert parsed.tools is None
    assert parsed.tool_choice is None
    assert parsed.previous_response_id is None
    assert parsed.extensions is None


def test_function_call_function_call_output_and_reasoning_items_parse() -> None:
    parsed = parse_response_request(
        request(
            input=[
                message(text("Weather in Paris?")),
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "t"}],
                },
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": '{"city": "Paris"}',
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            ]
        )
    )
    assert parsed.input[1:] == [
        Reasoning(id="rs_1", summary=[SummaryText(text="t")]),
        FunctionCall(
            id="fc_1", call_id="call_1", name="get_weather", arguments='{"city": "Paris"}'
        ),
        FunctionCallOutput(type="function_call_output", call_id="call_1", output="sunny"),
    ]


def test_function_call_id_is_optional_on_input() -> None:
    parsed = parse_response_request(
        request(input=[{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}])
    )
    item = parsed.input[0]
    assert isinstance(item, FunctionCall)
    assert item.id is None


# --- required fields and unknown fields --------------------------------------------------------


def test_missing_model_is_invalid_request_naming_model() -> None:
    assert_invalid({"input": "Hi"}, "model")


def test_missing_input_is_invalid_request_naming_input() -> None:
    assert_invalid({"model": "m"}, "input")


def test_empty_input_list_is_invalid_request_naming_input() -> None:
    assert_invalid(request(input=[]), "input")


def test_empty_model_is_invalid_request_naming_model() -> None:
    assert_invalid(request(model=""), "model")


def test_unknown_top_level_field_is_invalid_request_naming_it() -> None:
    error = refused(request(tempreature=0.5))
    assert (error.code, error.status, error.param) == ("invalid_request", 400, "tempreature")


def test_unknown_field_in_a_message_is_invalid_request_naming_its_path() -> None:
    assert_invalid(
        request(input=[{"type": "message", "role": "user", "content": "x", "foo": 1}]),
        "input[0].foo",
    )


# --- wrong types name the nested path ----------------------------------------------------------


def test_wrong_type_of_model_names_model() -> None:
    assert_invalid(request(model=5), "model")


def test_wrong_type_of_input_names_input() -> None:
    assert_invalid(request(input=5), "input")


def test_input_item_that_is_not_an_object_names_its_index() -> None:
    assert_invalid(request(input=[message(text("a")), 7]), "input[1]")


def test_unknown_role_names_input_role() -> None:
    assert_invalid(
        request(input=[{"type": "message", "role": "bot", "content": "x"}]), "input[0].role"
    )


def test_missing_role_names_input_role() -> None:
    assert_invalid(request(input=[{"type": "message", "content": "x"}]), "input[0].role")


def test_missing_content_names_input_content() -> None:
    assert_invalid(request(input=[{"type": "message", "role": "user"}]), "input[0].content")


def test_wrong_type_of_content_names_input_content() -> None:
    assert_invalid(
        request(input=[{"type": "message", "role": "user", "content": 5}]), "input[0].content"
    )


def test_wrong_type_of_part_text_names_the_part_text() -> None:
    assert_invalid(request(input=[message(text("a"), text(5))]), "input[0].content[1].text")


def test_unknown_field_in_a_part_names_the_part_field() -> None:
    assert_invalid(
        request(input=[message({"type": "input_text", "text": "a", "extra": 1})]),
        "input[0].content[0].extra",
    )


def test_wrong_type_of_function_call_output_names_output() -> None:
    assert_invalid(
        request(input=[{"type": "function_call_output", "call_id": "c", "output": 5}]),
        "input[0].output",
    )


def test_missing_function_call_arguments_names_arguments() -> None:
    assert_invalid(
        request(input=[{"type": "function_call", "call_id": "c", "name": "f"}]),
        "input[0].arguments",
    )


def test_wrong_type_of_temperature_names_temperature() -> None:
    assert_invalid(request(temperature="hot"), "temperature")


def test_fractional_max_output_tokens_names_max_output_tokens() -> None:
    assert_invalid(request(max_output_tokens=1.5), "max_output_tokens")


def test_string_max_output_tokens_is_invalid_request_naming_max_output_tokens() -> None:
    assert_invalid(request(max_output_tokens="5"), "max_output_tokens")


def test_string_stream_is_invalid_request_naming_stream() -> None:
    assert_invalid(request(stream="yes"), "stream")


def test_wrong_type_of_extensions_names_extensions() -> None:
    assert_invalid(request(extensions=[]), "extensions")


# --- bounds ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 0.0, 1.3, 2, 2.0])
def test_temperature_from_0_to_2_is_accepted(value: float) -> None:
    assert parse_response_request(request(temperature=value)).temperature == value


@pytest.mark.parametrize("value", [2.5, -0.1, 2.0001])
def test_temperature_outside_0_to_2_is_invalid_request_naming_temperature(value: float) -> None:
    assert_invalid(request(temperature=value), "temperature")


def test_max_output_tokens_0_is_invalid_request_naming_max_output_tokens() -> None:
    assert_invalid(request(max_output_tokens=0), "max_output_tokens")


def test_max_output_tokens_1_is_accepted() -> None:
    assert parse_response_request(request(max_output_tokens=1)).max_output_tokens == 1


# --- content part types ------------------------------------------------------------------------


@pytest.mark.parametrize("part_type", ["input_image", "input_audio", "input_file"])
def test_reserved_part_type_is_unsupported_capability_naming_the_part_type(
    part_type: str,
) -> None:
    error = refused(
        request(input=[message(text("a")), message(text("b"), {"type": part_type, "url": "x"})])
    )
    assert (error.code, error.status, error.param) == (
        "unsupported_capability",
        400,
        "input[1].content[1].type",
    )


def test_first_reserved_part_is_the_one_named() -> None:
    error = refused(
        request(input=[message({"type": "input_audio"}), message({"type": "input_image"})])
    )
    assert (error.code, error.param) == ("unsupported_capability", "input[0].content[0].type")


def test_unknown_part_type_names_the_part_type() -> None:
    assert_invalid(
        request(input=[message(text("a"), {"type": "foo", "text": "a"})]),
        "input[0].content[1].type",
    )


def test_unknown_item_type_is_invalid_request_naming_the_item_type() -> None:
    assert_invalid(request(input=[message(text("a")), {"type": "foo"}]), "input[1].type")


def test_item_without_type_or_role_is_invalid_request_naming_the_item_type() -> None:
    # With a role it is a message (11.1).
    assert_invalid(request(input=[{"call_id": "c", "output": "x"}]), "input[0].type")


# --- extensions --------------------------------------------------------------------------------


def test_x_and_reverse_dns_extension_keys_are_accepted() -> None:
    extensions = {"x-foo": {"a": 1}, "org.example": [1, 2], "x-lmsp-jupyter": {}}
    assert parse_response_request(request(extensions=extensions)).extensions == extensions


@pytest.mark.parametrize("key", ["foo", "x-", ".example", "org.", "x_foo"])
def test_extension_key_not_namespaced_is_invalid_request_naming_extensions(key: str) -> None:
    assert_invalid(request(extensions={key: 1}), "extensions")


# --- response_format, tools and tool_choice ----------------------------------------------------


def test_json_schema_response_format_parses() -> None:
    parsed = parse_response_request(
        request(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
            }
        )
    )
    assert parsed.model_dump(by_alias=True)["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "answer",
            "description": None,
            "schema": {"type": "object"},
            "strict": True,
        },
    }


def test_unknown_response_format_type_names_response_format_type() -> None:
    assert_invalid(request(response_format={"type": "xml"}), "response_format.type")


def test_missing_json_schema_names_response_format_json_schema() -> None:
    assert_invalid(request(response_format={"type": "json_schema"}), "response_format.json_schema")


def test_tool_with_invalid_name_names_the_tool_name() -> None:
    assert_invalid(request(tools=[{"type": "function", "name": "bad name"}]), "tools[0].name")


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_tool_choice_strings_are_accepted(choice: str) -> None:
    tools = [{"type": "function", "name": "get_weather"}]
    assert parse_response_request(request(tools=tools, tool_choice=choice)).tool_choice == choice


@pytest.mark.parametrize("tools", [None, []])
def test_tool_choice_required_without_tools_is_invalid_request_naming_tool_choice(
    tools: list[object] | None,
) -> None:
    assert_invalid(request(tools=tools, tool_choice="required"), "tool_choice")


def test_tool_choice_named_function_in_tools_is_accepted() -> None:
    tool = {"type": "function", "name": "get_weather"}
    parsed = parse_response_request(
        request(tools=[tool], tool_choice={"type": "function", "name": "get_weather"})
    )
    assert parsed.tool_choice == NamedToolChoice(type="function", name="get_weather")


@pytest.mark.parametrize("choice", ["sometimes", 5, ["auto"]])
def test_unknown_tool_choice_is_invalid_request_naming_tool_choice(choice: Any) -> None:
    assert_invalid(request(tool_choice=choice), "tool_choice")


def test_named_tool_choice_without_name_names_tool_choice_name() -> None:
    assert_invalid(request(tool_choice={"type": "function"}), "tool_choice.name")


def test_named_tool_choice_without_type_names_tool_choice_type() -> None:
    assert_invalid(request(tool_choice={"name": "get_weather"}), "tool_choice.type")


@pytest.mark.parametrize(
    "tools", [None, [{"type": "function", "name": "get_weather"}]], ids=["no-tools", "other-tool"]
)
def test_named_tool_choice_not_in_tools_is_invalid_request_naming_tool_choice_name(
    tools: list[dict[str, Any]] | None,
) -> None:
    assert_invalid(
        request(tools=tools, tool_choice={"type": "function", "name": "get_time"}),
        "tool_choice.name",
    )


def test_parse_response_request_returns_a_response_request() -> None:
    assert isinstance(parse_response_request(request()), ResponseRequest)
