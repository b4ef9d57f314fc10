"""Constrained decoding on the real bundled model: JSON Schema output and forced tool calls.

LMSP 1.0 6.1 (``response_format``), 6.3 (streaming) and 6.5 (tool calls), with llguidance holding
each token to the schema. Greedy and short: every string is bounded by ``maxLength``, every
array by ``maxItems`` and most numbers by bounds, so the JSON closes well before
``max_output_tokens``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import jsonschema
import pytest

from lmsp_jupyter.engine.generation import CancelToken
from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.events import (
    FunctionCallArgumentsDelta,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    ResponseEvent,
)
from lmsp_jupyter.protocol.items import OutputFunctionCall, OutputMessage
from lmsp_jupyter.protocol.requests import parse_response_request
from lmsp_jupyter.protocol.responses import Response
from lmsp_jupyter.service.responses import ResponseService
from tests.conftest import MODEL
from tests.helpers import WEATHER, call_events, message_events

QUESTION = "What is the weather in Paris?"

TIME: dict[str, Any] = {
    "type": "function",
    "name": "get_time",
    "description": "The current time in a time zone",
    "parameters": {
        "type": "object",
        "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}},
        "required": ["zone"],
        "additionalProperties": False,
    },
}
NEWS: dict[str, Any] = {
    "type": "function",
    "name": "get_news",
    "description": "Headlines about a topic",
    "parameters": {
        "type": "object",
        "properties": {
            "topic": {"type": "string", "maxLength": 12},
            "count": {"enum": [1, 2, 3]},
        },
        "required": ["topic", "count"],
        "additionalProperties": False,
    },
}
BOOKING: dict[str, Any] = {
    "type": "function",
    "name": "book_table",
    "description": "Book a table at a restaurant",
    "parameters": {
        "type": "object",
        "properties": {
            "day": {"type": "string", "format": "date"},
            "guests": {"type": "integer", "minimum": 1, "maximum": 8},
            "contact": {"type": "string", "format": "email", "maxLength": 24},
            "seating": {"oneOf": [{"const": "inside"}, {"const": "terrace"}]},
        },
        "required": ["day", "guests", "contact", "seating"],
        "additionalProperties": False,
    },
}
TOOLS = {tool["name"]: tool for tool in (WEATHER, TIME, NEWS, BOOKING)}
#: The formats of the dialect the schemas are written in (a bare FormatChecker() also holds
#: draft 3's "time", which refuses RFC 3339 offsets).
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER

WORD = {"type": "string", "maxLength": 10}
DIGIT = {"type": "integer", "minimum": 0, "maximum": 9}
POINT = {
    "type": "object",
    "properties": {"x": DIGIT, "y": DIGIT},
    "required": ["x", "y"],
    "additionalProperties": False,
}


def obj(**properties: Any) -> dict[str, Any]:
    """An object schema whose ``properties`` are all required."""
    return {"type": "object", "properties": properties, "required": list(properties)}


SCHEMAS: dict[str, dict[str, Any]] = {
    "nested_object_with_required_fields": obj(
        name={"type": "string", "maxLength": 12},
        age={"type": "integer", "minimum": 0, "maximum": 120},
        address=obj(city={"type": "string", "maxLength": 12}),
    ),
    "array_of_objects_with_max_items": {
        "type": "array",
        "items": obj(n={"type": "string", "maxLength": 8}),
        "minItems": 1,
        "maxItems": 2,
    },
    "array_of_points": {"type": "array", "items": POINT, "minItems": 2, "maxItems": 3},
    "enum_field": obj(colour={"enum": ["red", "green", "blue"]}),
    "string_with_max_length": obj(word={"type": "string", "minLength": 1, "maxLength": 10}),
    "string_length_window": obj(code={"type": "string", "minLength": 3, "maxLength": 5}),
    "defs_and_refs": {
        "type": "object",
        "$defs": {"tag": {"type": "string", "maxLength": 6}},
        "properties": {"a": {"$ref": "#/$defs/tag"}, "b": {"$ref": "#/$defs/tag"}},
        "required": ["a", "b"],
    },
    "draft7_definitions": {
        "definitions": {"unit": {"enum": ["kg", "lb"]}},
        **obj(weight=DIGIT, unit={"$ref": "#/definitions/unit"}),
    },
    "integer_bounds": obj(age={"type": "integer", "minimum": 18, "maximum": 99}),
    "negative_bounds": obj(t={"type": "integer", "minimum": -40, "maximum": -1}),
    # Free decimals let the tiny model write zeros until the token limit: these schemas bound
    # their digits (multipleOf, maxLength); a run of zeros is the model's loop, not a breach.
    "exclusive_bounds": obj(
        p={"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "multipleOf": 0.125}
    ),
    "number_bounds": obj(
        price={"type": "number", "minimum": 0, "maximum": 1000, "multipleOf": 0.5}
    ),
    "multiple_of_integer": obj(n={"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 95}),
    "multiple_of_decimal": obj(
        q={"type": "number", "multipleOf": 0.25, "minimum": 0, "maximum": 9}
    ),
    "top_level_bounded_integer": {"type": "integer", "minimum": 1, "maximum": 12},
    "format_email": obj(email={"type": "string", "format": "email", "maxLength": 24}),
    "format_date": obj(day={"type": "string", "format": "date"}),
    "format_time": obj(at={"type": "string", "format": "time", "maxLength": 14}),
    "format_date_time": obj(when={"type": "string", "format": "date-time"}),
    "format_uuid": obj(id={"type": "string", "format": "uuid"}),
    "format_ipv4": obj(ip={"type": "string", "format": "ipv4"}),
    "pattern": obj(ref={"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}),
    "any_of": obj(v={"anyOf": [WORD, DIGIT, {"type": "null"}]}),
    "one_of_disjoint_shapes": {
        "oneOf": [
            {**obj(kind={"const": "circle"}, r=DIGIT), "additionalProperties": False},
            {**obj(kind={"const": "square"}, side=DIGIT), "additionalProperties": False},
        ]
    },
    "all_of": {"allOf": [obj(a=DIGIT), obj(b=WORD)], "maxProperties": 2},
    "recursive_list": {
        "$defs": {
            "cell": {
                **obj(head=DIGIT, tail={"anyOf": [{"type": "null"}, {"$ref": "#/$defs/cell"}]}),
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/cell",
    },
    "unique_items_false": {
        "type": "array",
        "items": DIGIT,
        "uniqueItems": False,
        "minItems": 1,
        "maxItems": 3,
    },
    "max_properties": {
        "type": "object",
        "patternProperties": {"^[a-z]{1,6}$": DIGIT},
        "additionalProperties": False,
        "minProperties": 1,
        "maxProperties": 2,
    },
    "min_properties_of_optionals": {
        "type": "object",
        "properties": {"a": DIGIT, "b": DIGIT},
        "additionalProperties": False,
        "minProperties": 1,
    },
    "unicode_enum": obj(city={"enum": ["東京", "Zürich", "São Paulo", "Kraków"]}),
    "unicode_emoji_enum": {"enum": ["🙂", "🙃", "☀️"]},
    "unicode_const": obj(greeting={"const": "こんにちは"}),
    "boolean": obj(ok={"type": "boolean"}),
    "null": {"type": "null"},
    "type_list": obj(v={"type": ["boolean", "null"]}),
    "nullable_string": obj(nick={"type": ["string", "null"], "maxLength": 8}),
    "tuple": {
        "type": "array",
        "prefixItems": [WORD, DIGIT, {"type": "boolean"}],
        "items": False,
        "minItems": 3,
    },
    "matrix": {
        "type": "array",
        "items": {"type": "array", "items": DIGIT, "minItems": 2, "maxItems": 2},
        "minItems": 2,
        "maxItems": 2,
    },
    "enum_of_numbers": obj(level={"enum": [1, 2.5, -3]}),
    "const_object": obj(version={"const": {"major": 1, "minor": 0}}),
    "array_of_enums": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    "optional_fields_closed": {
        "type": "object",
        "properties": {
            "title": WORD,
            "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
        },
        "required": ["title"],
        "additionalProperties": False,
    },
    "deeply_nested": obj(a=obj(b=obj(c=obj(d=obj(e=DIGIT))))),
    "event": obj(
        name=WORD,
        day={"type": "string", "format": "date"},
        seats={"type": "integer", "minimum": 1, "maximum": 500},
        tags={"type": "array", "items": {"enum": ["work", "home"]}, "maxItems": 2},
    ),
    "text_with_line_breaks": obj(poem={"type": "string", "maxLength": 40}),
}


def json_format(schema: dict[str, Any], name: str = "answer") -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": QUESTION, "temperature": 0, "max_output_tokens": 60, **fields}


async def respond(service: ResponseService, data: dict[str, Any]) -> Response:
    return await service.complete(await service.start(parse_response_request(data)))


async def stream(service: ResponseService, data: dict[str, Any]) -> list[ResponseEvent]:
    run = await service.start(parse_response_request(data))
    return [event async for event in service.events(run, CancelToken())]


def added_and_done(
    events: list[ResponseEvent], names: Callable[[int], list[str]]
) -> tuple[OutputItemAdded, OutputItemDone]:
    """Check that ``events`` are ``names(deltas)`` with at least one delta, numbered from 1;
    return the data of the item's added and done events."""
    deltas = len(events) - len(names(0))
    assert deltas >= 1
    assert [e.event for e in events] == names(deltas)
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    added, done = events[2].data, events[-2].data
    assert isinstance(added, OutputItemAdded) and isinstance(done, OutputItemDone)
    return added, done


def calls(response: Response) -> list[OutputFunctionCall]:
    return [item for item in response.output if isinstance(item, OutputFunctionCall)]


def messages(response: Response) -> list[OutputMessage]:
    return [item for item in response.output if isinstance(item, OutputMessage)]


def text_of(response: Response) -> str:
    (message,) = response.output
    assert isinstance(message, OutputMessage)
    (part,) = message.content
    return part.text


def assert_valid_call(call: OutputFunctionCall, names: Sequence[str]) -> None:
    assert call.name in names
    assert call.id.startswith("fc_")
    assert call.call_id.startswith("call_")
    jsonschema.validate(
        json.loads(call.arguments), TOOLS[call.name]["parameters"], format_checker=FORMATS
    )


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def context_size() -> int:
    return 1024


# --- response_format: json_schema --------------------------------------------------------------


@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS.keys())
async def test_json_schema_output_completes_parses_and_validates(
    service: ResponseService, schema: dict[str, Any]
) -> None:
    question = "Write a two-line poem about rain." if "poem" in json.dumps(schema) else None
    response = await respond(
        service,
        body(
            input=question or "Describe it as JSON.",
            max_output_tokens=80,
            response_format=json_format(schema),
        ),
    )
    assert response.status == "completed", response.output
    assert response.incomplete_details is None
    # json.loads refuses raw control characters in strings: they must come escaped.
    jsonschema.validate(json.loads(text_of(response)), schema, format_checker=FORMATS)


#: Schemas as people write them, with no bound on any number: the decoder bounds integers to
#: 16 digits and decimals to 10 places (``engine/guidance.py``), so a greedy answer that starts
#: a long number still ends. Each question ends its line: the bundled base model continues
#: the text as written, its answer on the next line.
COMMON: dict[str, tuple[str, dict[str, Any]]] = {
    "person": ("Describe a person.\n", obj(name={"type": "string"}, age={"type": "integer"})),
    "owner_and_pets": (
        "Describe a pet owner and their pets.\n",
        obj(
            owner=obj(name={"type": "string"}, age={"type": "integer"}),
            pets={
                "type": "array",
                "items": obj(name={"type": "string"}, legs={"type": "integer"}),
                "maxItems": 3,
            },
        ),
    ),
    "product": (
        "Describe a product for sale.\n",
        obj(name={"type": "string"}, price={"type": "number"}, stock={"type": "integer"}),
    ),
    "measurements": (
        "List some measurements.\n",
        obj(values={"type": "array", "items": {"type": "number"}, "maxItems": 4}),
    ),
}


@pytest.mark.parametrize(("question", "schema"), COMMON.values(), ids=COMMON.keys())
async def test_common_schemas_with_unbounded_numbers_complete(
    service: ResponseService, question: str, schema: dict[str, Any]
) -> None:
    response = await respond(
        service,
        body(input=question, max_output_tokens=120, response_format=json_format(schema)),
    )
    assert response.status == "completed", text_of(response)
    jsonschema.validate(json.loads(text_of(response)), schema, format_checker=FORMATS)


async def test_output_cut_by_max_output_tokens_mid_json_is_incomplete_not_failed(
    service: ResponseService,
) -> None:
    schema = obj(story={"type": "string", "minLength": 200, "maxLength": 300})
    response = await respond(
        service, body(max_output_tokens=8, response_format=json_format(schema))
    )
    assert response.status == "incomplete"
    assert response.error is None
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert text_of(response).startswith('{"story": "')


@pytest.mark.parametrize(
    ("schema", "detail"),
    [
        ({"type": "array", "items": DIGIT, "uniqueItems": True}, "uniqueItems"),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf"),
        (obj(n={"not": {"type": "string"}}), "not"),
    ],
    ids=["unique_items", "overlapping_one_of", "not"],
)
async def test_schema_llguidance_cannot_enforce_is_refused_naming_response_format(
    service: ResponseService, schema: dict[str, Any], detail: str
) -> None:
    with pytest.raises(LmspError) as caught:
        await service.start(parse_response_request(body(response_format=json_format(schema))))
    error = caught.value
    assert (error.code, error.status, error.param) == ("invalid_request", 400, "response_format")
    assert detail in str(error.detail)


async def test_tool_parameters_llguidance_cannot_enforce_are_refused_naming_the_tool(
    service: ResponseService,
) -> None:
    odd = {**TIME, "parameters": {"type": "object", "if": {"required": ["zone"]}, "then": {}}}
    with pytest.raises(LmspError) as caught:
        await service.start(parse_response_request(body(tools=[WEATHER, odd])))
    error = caught.value
    assert (error.code, error.status, error.param) == (
        "invalid_request",
        400,
        "tools[1].parameters",
    )


# --- tool_choice -------------------------------------------------------------------------------


async def test_required_with_one_tool_gives_exactly_one_valid_call_and_no_message(
    service: ResponseService,
) -> None:
    response = await respond(service, body(tools=[WEATHER], tool_choice="required"))
    assert response.status == "completed"
    (call,) = response.output
    assert isinstance(call, OutputFunctionCall)
    assert_valid_call(call, ["get_weather"])


async def test_named_tool_among_several_is_the_one_called(service: ResponseService) -> None:
    choice = {"type": "function", "name": "get_time"}
    response = await respond(service, body(tools=[WEATHER, TIME, NEWS], tool_choice=choice))
    assert response.status == "completed"
    assert messages(response) == []
    (call,) = calls(response)
    assert call.name == "get_time"
    assert_valid_call(call, ["get_time"])


async def test_named_tool_that_does_not_fit_the_question_is_still_the_one_called(
    service: ResponseService,
) -> None:
    choice = {"type": "function", "name": "get_news"}
    response = await respond(service, body(tools=[WEATHER, NEWS], tool_choice=choice))
    assert response.status == "completed"
    (call,) = response.output
    assert isinstance(call, OutputFunctionCall)
    assert_valid_call(call, ["get_news"])


async def test_required_with_several_tools_calls_one_of_them_with_valid_arguments(
    service: ResponseService,
) -> None:
    response = await respond(service, body(tools=[WEATHER, TIME, NEWS], tool_choice="required"))
    assert response.status == "completed"
    assert messages(response) == []
    (call,) = calls(response)
    assert_valid_call(call, ["get_weather", "get_time", "get_news"])


async def test_forced_call_keeps_bounds_formats_and_one_of_in_its_arguments(
    service: ResponseService,
) -> None:
    response = await respond(
        service,
        body(
            input="Book a table for two tomorrow.",
            tools=[BOOKING],
            tool_choice="required",
            max_output_tokens=160,
        ),
    )
    assert response.status == "completed"
    (call,) = response.output
    assert isinstance(call, OutputFunctionCall)
    assert_valid_call(call, ["book_table"])


async def test_tool_choice_none_gives_a_message_and_no_call(service: ResponseService) -> None:
    response = await respond(
        service, body(tools=[WEATHER, TIME], tool_choice="none", max_output_tokens=12)
    )
    assert response.status in ("completed", "incomplete")
    assert calls(response) == []
    (message,) = messages(response)
    assert message.content[0].text != ""


async def test_tool_round_trip_ends_with_a_message_answer(service: ResponseService) -> None:
    question = [{"type": "message", "role": "user", "content": QUESTION}]
    first = await respond(service, body(input=question, tools=[WEATHER], tool_choice="required"))
    (call,) = calls(first)
    received = call.model_dump()
    assert received["type"] == "function_call"
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C and sunny"}
    run = await service.start(
        parse_response_request(
            body(
                input=[*question, received, result],
                tools=[WEATHER],
                tool_choice="none",
                max_output_tokens=20,
            )
        )
    )
    assert "18 C and sunny" in run.prompt.text
    assert '"name": "get_weather"' in run.prompt.text
    second = await service.complete(run)
    assert second.status in ("completed", "incomplete")
    assert calls(second) == []
    assert text_of(second) != ""


# --- streaming ---------------------------------------------------------------------------------


async def test_json_schema_stream_is_created_added_text_deltas_done_completed(
    service: ResponseService,
) -> None:
    schema = SCHEMAS["nested_object_with_required_fields"]
    events = await stream(service, body(max_output_tokens=80, response_format=json_format(schema)))
    added, done = added_and_done(events, message_events)
    assert isinstance(done.item, OutputMessage)
    assert done.item.id == added.item.id
    deltas = [e.data for e in events if isinstance(e.data, OutputTextDelta)]
    assert {d.item_id for d in deltas} == {added.item.id}
    text = "".join(d.delta for d in deltas)
    assert done.item.content[0].text == text
    jsonschema.validate(json.loads(text), schema)


async def test_forced_call_stream_is_created_added_argument_deltas_done_completed(
    service: ResponseService,
) -> None:
    events = await stream(service, body(tools=[WEATHER, TIME], tool_choice="required"))
    added, done = added_and_done(events, call_events)
    assert isinstance(added.item, OutputFunctionCall)
    assert added.item.arguments == ""
    call = done.item
    assert isinstance(call, OutputFunctionCall)
    assert (call.id, call.call_id, call.name) == (
        added.item.id,
        added.item.call_id,
        added.item.name,
    )
    deltas = [e.data for e in events if isinstance(e.data, FunctionCallArgumentsDelta)]
    assert {d.item_id for d in deltas} == {call.id}
    assert "".join(d.delta for d in deltas) == call.arguments
    assert_valid_call(call, ["get_weather", "get_time"])
