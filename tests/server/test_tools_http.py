"""Tools and structured output over HTTP against a live ``jupyter server`` (real model).

LMSP 1.0 6.1 (``response_format``), 6.3 (streaming), 6.5 (tool calls) and 8 (model capabilities).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema

from tests.conftest import MODEL
from tests.helpers import WEATHER, call_events
from tests.server.helpers import assert_problem, stream

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "sky": {"enum": ["sunny", "cloudy", "rainy"]},
    },
    "required": ["city", "sky"],
}
JSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}


def ask(**fields: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "input": "What is the weather in Paris?",
        "temperature": 0,
        "max_output_tokens": 60,
        **fields,
    }


def test_json_schema_sync_and_stream_give_the_same_valid_text(client: httpx.Client) -> None:
    body = ask(response_format=JSON_FORMAT)
    response = client.post("/responses", json=body)
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["status"] == "completed"
    (message,) = reply["output"]
    assert message["type"] == "message"
    (part,) = message["content"]
    text = part["text"]
    jsonschema.validate(json.loads(text), SCHEMA)

    streamed, events = stream(client, body)
    assert streamed.status_code == 200
    assert events[-1].event == "response.completed"
    deltas = "".join(e.data["delta"] for e in events if e.event == "response.output_text.delta")
    (done,) = [e.data for e in events if e.event == "response.output_item.done"]
    assert deltas == text
    assert done["item"]["content"] == [{"type": "output_text", "text": text, "annotations": []}]


def test_forced_call_over_sse_streams_argument_deltas_and_a_whole_call_item(
    client: httpx.Client,
) -> None:
    response, events = stream(client, ask(tools=[WEATHER], tool_choice="required"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    count = len(events) - 6
    assert count >= 1
    assert [e.event for e in events] == call_events(count)
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    added, done = events[2].data, events[-2].data
    call = done["item"]
    assert set(call) == {"type", "id", "call_id", "name", "arguments", "status"}
    assert (added["item"]["status"], call["status"]) == ("in_progress", "completed")
    assert call["type"] == "function_call"
    assert call["name"] == "get_weather"
    assert call["id"].startswith("fc_") and call["call_id"].startswith("call_")
    assert (added["item"]["id"], added["output_index"], done["output_index"]) == (call["id"], 0, 0)
    deltas = [e.data for e in events if e.event == "response.function_call_arguments.delta"]
    assert {d["item_id"] for d in deltas} == {call["id"]}
    assert "".join(d["delta"] for d in deltas) == call["arguments"]
    jsonschema.validate(json.loads(call["arguments"]), WEATHER["parameters"])


def test_tool_choice_naming_a_tool_not_in_tools_is_invalid_request(client: httpx.Client) -> None:
    body = ask(tools=[WEATHER], tool_choice={"type": "function", "name": "get_time"})
    problem = assert_problem(client.post("/responses", json=body), 400, "invalid_request")
    assert problem["param"] == "tool_choice.name"


def test_function_call_output_matching_no_call_is_invalid_request(client: httpx.Client) -> None:
    body = ask(
        input=[
            {"type": "message", "role": "user", "content": "What is the weather in Paris?"},
            {"type": "function_call_output", "call_id": "call_unknown", "output": "sunny"},
        ],
        tools=[WEATHER],
    )
    problem = assert_problem(client.post("/responses", json=body), 400, "invalid_request")
    assert problem["param"] == "input[1].call_id"


def test_tool_parameters_with_unique_items_are_invalid_request(client: httpx.Client) -> None:
    days = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    parameters = {"type": "object", "properties": {"days": days}}
    body = ask(tools=[{**WEATHER, "parameters": parameters}], tool_choice="required")
    problem = assert_problem(client.post("/responses", json=body), 400, "invalid_request")
    assert problem["param"] == "tools[0].parameters"


def test_response_format_schema_with_not_is_invalid_request(client: httpx.Client) -> None:
    schema = {"type": "object", "properties": {"n": {"not": {"type": "integer"}}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    problem = assert_problem(
        client.post("/responses", json=ask(response_format=fmt)), 400, "invalid_request"
    )
    assert problem["param"] == "response_format"


def test_models_list_tools_and_structured_output_but_not_reasoning(client: httpx.Client) -> None:
    listing = client.get("/models").json()
    model = next(m for m in listing["data"] if m["id"] == MODEL)
    assert "tools" in model["capabilities"]
    assert "structured_output" in model["capabilities"]
    assert "reasoning" not in model["capabilities"]
