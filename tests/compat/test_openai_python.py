"""The official ``openai`` Python SDK against the live server and the bundled model (section 11).

The bundled model is a small base model: these tests check shapes, ids, event order and
validity, never what the model says. A response that must complete (``get_final_response``,
``parse``) is held to a small JSON Schema, whose grammar ends it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import (
    Response,
    ResponseContentPartAddedEvent,
    ResponseCreatedEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from pydantic import BaseModel

from tests.conftest import MODEL, LiveServer
from tests.helpers import eventually

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Lisbon"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class Verdict(BaseModel):
    """What the structured-output tests ask for: small, so the grammar ends it soon."""

    sunny: bool


@pytest.fixture
def sdk(live_server: LiveServer) -> Iterator[OpenAI]:
    """The SDK pointed at the Jupyter port, the server's token as its API key."""
    with OpenAI(base_url=live_server.lmsp, api_key=live_server.token, max_retries=0) as client:
        yield client


def ask(**fields: Any) -> Any:
    """A small, deterministic request."""
    return {"model": MODEL, "temperature": 0, "max_output_tokens": 8, **fields}


# --- responses.create ---------------------------------------------------------------------------


def test_create_returns_a_response_the_sdk_reads(sdk: OpenAI) -> None:
    response = sdk.responses.create(**ask(input="The sky is", metadata={"cell": "c1"}))
    assert isinstance(response, Response)
    assert response.id.startswith("resp_")
    assert (response.object, response.model, response.status) == ("response", MODEL, "incomplete")
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    (message,) = response.output
    assert isinstance(message, ResponseOutputMessage)
    (part,) = message.content
    assert isinstance(part, ResponseOutputText)
    assert (message.status, part.annotations) == ("incomplete", [])
    assert response.output_text == part.text != ""
    assert response.metadata == {"cell": "c1"}
    assert (response.temperature, response.max_output_tokens) == (0, 8)
    assert response.usage is not None
    assert response.usage.output_tokens == 8
    assert response.usage.output_tokens_details.reasoning_tokens == 0
    assert response.usage.input_tokens_details.cached_tokens >= 0


def test_instructions_and_developer_messages_are_accepted(sdk: OpenAI) -> None:
    response = sdk.responses.create(
        **ask(
            instructions="Answer in French.",
            input=[
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "The sky is"},
            ],
        )
    )
    assert response.instructions == "Answer in French."
    assert response.output_text != ""


def test_stream_true_gives_typed_events_numbered_from_1(sdk: OpenAI) -> None:
    events = list(sdk.responses.create(**ask(input="The sky is"), stream=True))
    assert [event.sequence_number for event in events] == list(range(1, len(events) + 1))
    assert isinstance(events[0], ResponseCreatedEvent)
    assert isinstance(events[1], ResponseInProgressEvent)
    assert isinstance(events[2], ResponseOutputItemAddedEvent)
    assert isinstance(events[3], ResponseContentPartAddedEvent)
    assert isinstance(events[-1], ResponseIncompleteEvent)
    assert events[0].response.status == "in_progress"
    deltas = [event for event in events if isinstance(event, ResponseTextDeltaEvent)]
    (done,) = [event for event in events if isinstance(event, ResponseTextDoneEvent)]
    assert {(d.output_index, d.content_index, d.item_id) for d in deltas} == {(0, 0, done.item_id)}
    assert "".join(d.delta for d in deltas) == done.text != ""
    (item_done,) = [e for e in events if isinstance(e, ResponseOutputItemDoneEvent)]
    final = events[-1].response
    assert final.output_text == done.text
    assert final.output[0].id == item_done.item.id == done.item_id


def test_responses_stream_helper_gives_the_final_parsed_response(sdk: OpenAI) -> None:
    with sdk.responses.stream(
        **ask(input="Is the sky blue?", max_output_tokens=40), text_format=Verdict
    ) as stream:
        names = [event.type for event in stream]
        final = stream.get_final_response()
    assert names[0] == "response.created" and names[-1] == "response.completed"
    assert final.status == "completed"
    assert isinstance(final.output_parsed, Verdict)
    assert json.loads(final.output_text) == final.output_parsed.model_dump()


def test_parse_with_a_pydantic_model(sdk: OpenAI) -> None:
    parsed = sdk.responses.parse(
        **ask(input="Is the sky blue?", max_output_tokens=40), text_format=Verdict
    )
    assert parsed.status == "completed"
    assert isinstance(parsed.output_parsed, Verdict)
    assert parsed.text is not None and parsed.text.format is not None
    assert parsed.text.format.type == "json_schema"


def test_json_object_format_gives_a_json_object(sdk: OpenAI) -> None:
    response = sdk.responses.create(
        **ask(input="A JSON object:", max_output_tokens=40),
        text={"format": {"type": "json_object"}},
    )
    if response.status == "completed":
        assert isinstance(json.loads(response.output_text), dict)
    else:  # cut short: still the start of an object
        assert response.output_text.lstrip().startswith("{")


# --- tools ---------------------------------------------------------------------------------------


def test_forced_tool_call_and_the_round_trip_with_its_output(sdk: OpenAI) -> None:
    question = {"role": "user", "content": "What is the weather in Paris?"}
    first = sdk.responses.create(
        **ask(input=[question], max_output_tokens=40),
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    assert first.status == "completed"
    (call,) = first.output
    assert isinstance(call, ResponseFunctionToolCall)
    assert (call.name, call.status) == ("get_weather", "completed")
    assert call.call_id.startswith("call_") and call.id is not None and call.id.startswith("fc_")
    assert json.loads(call.arguments)["city"] in ("Paris", "Lisbon")
    second = sdk.responses.create(
        **ask(
            input=[
                question,
                *first.output,
                {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny."},
            ]
        ),
        tools=[WEATHER],
        tool_choice="none",
    )
    assert second.status == "incomplete"
    assert second.output_text != ""
    assert second.tool_choice == "none"


# --- background ---------------------------------------------------------------------------------


def wait_final(sdk: OpenAI, response_id: str) -> Response:
    def final() -> Response | None:
        response = sdk.responses.retrieve(response_id)
        return response if response.status not in ("queued", "in_progress") else None

    return eventually(final, within=120, interval=0.2, what="the background response's end")


def test_background_create_retrieve_and_stream_resume(sdk: OpenAI) -> None:
    created = sdk.responses.create(**ask(input="The sky is"), background=True)
    assert (created.status, created.background) == ("queued", True)
    final = wait_final(sdk, created.id)
    assert (final.id, final.status) == (created.id, "incomplete")
    assert final.output_text != ""
    resumed = list(sdk.responses.retrieve(created.id, stream=True, starting_after=2))
    assert resumed[0].sequence_number == 3
    assert isinstance(resumed[-1], ResponseIncompleteEvent)
    assert resumed[-1].response.output_text == final.output_text


def test_background_stream_true_gives_the_task_events(sdk: OpenAI) -> None:
    events = list(sdk.responses.create(**ask(input="The sky is"), background=True, stream=True))
    assert isinstance(events[0], ResponseCreatedEvent)
    assert isinstance(events[-1], ResponseIncompleteEvent)
    assert sdk.responses.retrieve(events[0].response.id).status == "incomplete"


def test_background_cancel_ends_cancelled(sdk: OpenAI) -> None:
    created = sdk.responses.create(
        **ask(input="Once upon a time", max_output_tokens=2000), background=True
    )
    cancelled = sdk.responses.cancel(created.id)
    assert cancelled.id == created.id
    assert wait_final(sdk, created.id).status == "cancelled"


def test_retrieve_of_an_unknown_response_is_not_found(sdk: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        sdk.responses.retrieve("resp_01J8M6Q4W2T7N5R3V9X1Z8B0DF")
    assert (info.value.status_code, info.value.code) == (404, "response_not_found")


# --- chat completions ---------------------------------------------------------------------------


def test_chat_completion(sdk: OpenAI) -> None:
    completion = sdk.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "The sky is"},
        ],
        max_tokens=8,
        temperature=0,
    )
    assert isinstance(completion, ChatCompletion)
    assert (completion.object, completion.model) == ("chat.completion", MODEL)
    (choice,) = completion.choices
    assert (choice.index, choice.finish_reason, choice.message.role) == (0, "length", "assistant")
    assert choice.message.content
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 8
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 8


def test_chat_completion_streams_chunks_then_the_usage(sdk: OpenAI) -> None:
    chunks = list(
        sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "The sky is"}],
            max_completion_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(isinstance(chunk, ChatCompletionChunk) for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text != ""
    *_, last_choice, usage = chunks
    assert last_choice.choices[0].finish_reason == "length"
    assert usage.choices == [] and usage.usage is not None
    assert usage.usage.completion_tokens == 8


def test_chat_completion_forced_tool_call(sdk: OpenAI) -> None:
    completion = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": WEATHER["parameters"],
                },
            }
        ],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=40,
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] in ("Paris", "Lisbon")


def test_a_seed_makes_sampling_at_temperature_1_repeatable(sdk: OpenAI) -> None:
    def sample(seed: int) -> str:
        completion = sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Once upon a time"}],
            max_tokens=16,
            temperature=1.0,
            top_p=1.0,
            seed=seed,
        )
        return completion.choices[0].message.content or ""

    first = sample(7)
    assert first != ""
    assert sample(7) == first
    # Other seeds draw other texts: not all of three can match the first by chance.
    assert {sample(8), sample(9)} != {first}


def test_chat_completion_with_n_other_than_1_is_bad_request(sdk: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], n=2, max_tokens=2
        )
    assert (info.value.code, info.value.param) == ("invalid_request", "n")


# --- errors --------------------------------------------------------------------------------------


def test_errors_are_the_sdks_exception_classes_with_the_code(
    sdk: OpenAI, live_server: LiveServer
) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        sdk.responses.create(model="no-such-model", input="Hi")
    assert not_found.value.code == "model_not_found"
    assert "no-such-model" in not_found.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.responses.create(**ask(input="Hi"), extra_body={"frobnicate": 1})
    assert (bad.value.code, bad.value.param) == ("invalid_request", "frobnicate")
    stranger = OpenAI(base_url=live_server.lmsp, api_key="wrong", max_retries=0)
    with stranger, pytest.raises(openai.AuthenticationError) as unauthorized:
        stranger.models.list()
    assert unauthorized.value.code == "unauthorized"


def test_models_list_has_created(sdk: OpenAI) -> None:
    models = {model.id: model for model in sdk.models.list()}
    assert models[MODEL].object == "model"
    assert isinstance(models[MODEL].created, int)
