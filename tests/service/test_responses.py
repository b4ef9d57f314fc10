"""Tests of ResponseService: request checks, event streams and final responses (LMSP 1.0 6.1-6.3).

The real engine runs the bundled Gemma 3 270M model, greedy and short; ``ScriptedEngine`` plays
the failures and cancellations the real model cannot be made to hit on demand.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from lmsp_jupyter.engine.catalog import ModelCatalog, ModelEntry
from lmsp_jupyter.engine.generation import CancelToken, ChatMessage, EngineError, ModelLoadError
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer
from lmsp_jupyter.engine.templates import ChatTemplate, ChatTemplateError, fallback_template
from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.events import (
    FINAL_EVENTS,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    ResponseCreated,
    ResponseEvent,
    ResponseFailed,
    ResponseIncomplete,
)
from lmsp_jupyter.protocol.items import OutputMessage, OutputText
from lmsp_jupyter.protocol.requests import ResponseRequest
from lmsp_jupyter.protocol.responses import IncompleteDetails, Usage
from lmsp_jupyter.service.responses import ResponseRun, ResponseService
from tests.conftest import MODEL
from tests.doubles import ScriptedEngine
from tests.helpers import message_events
from tests.service.helpers import (
    DELTA,
    START,
    names,
    real_engine,
    request,
    service_of,
)


async def events_of(
    service: ResponseService, run: ResponseRun, cancel: CancelToken | None = None
) -> list[ResponseEvent]:
    return [event async for event in service.events(run, cancel or CancelToken())]


def deltas(events: Sequence[ResponseEvent]) -> str:
    return "".join(e.data.delta for e in events if isinstance(e.data, OutputTextDelta))


def done_text(events: Sequence[ResponseEvent]) -> str:
    (done,) = [e.data for e in events if isinstance(e.data, OutputItemDone)]
    assert isinstance(done.item, OutputMessage)
    (part,) = done.item.content
    return part.text


def message_text(output: Sequence[object]) -> str:
    (message,) = output
    assert isinstance(message, OutputMessage)
    (part,) = message.content
    return part.text


async def refusal(service: ResponseService, req: ResponseRequest) -> LmspError:
    with pytest.raises(LmspError) as info:
        await service.start(req)
    return info.value


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_engine() -> Iterator[LocalEngine]:
    """An engine whose context window is 64 tokens (only its tokenizer is ever loaded)."""
    with real_engine(64) as engine:
        yield engine


@pytest.fixture(scope="module")
def entry() -> ModelEntry:
    return ModelCatalog(include_bundled=True).get(MODEL)


# --- the real model ----------------------------------------------------------------------------


async def test_stream_is_created_added_deltas_done_then_one_final_event(
    service: ResponseService,
) -> None:
    run = await service.start(request(max_output_tokens=8))
    events = await events_of(service, run)
    count = len(events) - 8
    assert count >= 1
    assert names(events) == message_events(count, "response.incomplete")
    assert [event.is_final for event in events] == [False] * (len(events) - 1) + [True]
    assert sum(event.event in FINAL_EVENTS for event in events) == 1


async def test_event_ids_run_from_1_without_gaps(service: ResponseService) -> None:
    run = await service.start(request(max_output_tokens=6))
    events = await events_of(service, run)
    assert [event.id for event in events] == list(range(1, len(events) + 1))


async def test_every_event_names_the_response_and_its_one_message_item(
    service: ResponseService,
) -> None:
    run = await service.start(request(max_output_tokens=6))
    events = await events_of(service, run)
    assert run.id.startswith("resp_")
    assert {event.data.response_id for event in events} == {run.id}  # type: ignore[union-attr]
    created, added = events[0].data, events[2].data
    assert isinstance(created, ResponseCreated)
    assert (created.status, created.response.id, created.response.status) == (
        "in_progress",
        run.id,
        "in_progress",
    )
    assert isinstance(added, OutputItemAdded)
    assert added.output_index == 0
    assert added.item == OutputMessage(id=added.item.id, status="in_progress", content=[])
    assert added.item.id.startswith("msg_")
    item_ids = {e.data.item_id for e in events if isinstance(e.data, OutputTextDelta)}
    assert item_ids == {added.item.id}
    (done,) = [e.data for e in events if isinstance(e.data, OutputItemDone)]
    assert (done.output_index, done.item.id) == (0, added.item.id)


async def test_deltas_concatenate_to_the_done_item_text_and_the_complete_text(
    service: ResponseService,
) -> None:
    streamed = await service.start(request(max_output_tokens=12))
    events = await events_of(service, streamed)
    text = deltas(events)
    assert text != ""
    assert done_text(events) == text
    assert message_text(streamed.output) == text
    response = await service.complete(await service.start(request(max_output_tokens=12)))
    assert message_text(response.output) == text


async def test_max_output_tokens_ends_incomplete_with_reason_max_output_tokens(
    service: ResponseService,
) -> None:
    run = await service.start(request(max_output_tokens=5))
    events = await events_of(service, run)
    final = events[-1].data
    assert isinstance(final, ResponseIncomplete)
    input_tokens = len(run.prompt.tokens)
    assert final.usage is not None
    cached = final.usage.input_tokens_details  # what earlier tests left in the cache
    assert 0 <= cached.cached_tokens < input_tokens
    usage = Usage(
        input_tokens=input_tokens,
        output_tokens=5,
        total_tokens=input_tokens + 5,
        input_tokens_details=cached,
    )
    response = run.response()
    assert final == ResponseIncomplete(
        response_id=run.id,
        status="incomplete",
        incomplete_details=IncompleteDetails(reason="max_output_tokens"),
        usage=usage,
        response=response,
    )
    assert (response.status, response.usage, response.error) == ("incomplete", usage, None)
    assert response.incomplete_details == IncompleteDetails(reason="max_output_tokens")


async def test_complete_returns_the_final_response_object(service: ResponseService) -> None:
    req = request(max_output_tokens=4)
    run = await service.start(req)
    response = await service.complete(run)
    assert response.id == run.id
    assert (response.object, response.model, response.status) == ("response", MODEL, "incomplete")
    assert response.usage is not None
    assert response.usage.output_tokens == 4
    assert response.error is None
    (message,) = response.output
    assert isinstance(message, OutputMessage)
    assert message.role == "assistant"
    assert message.id.startswith("msg_")


async def test_usage_input_tokens_are_the_tokenizers_count_of_the_rendered_prompt(
    service: ResponseService, entry: ModelEntry
) -> None:
    messages = [
        ChatMessage(role="system", content="Answer in one word."),
        ChatMessage(role="user", content="What colour is the sky?"),
    ]
    tokenizer = LlamaTokenizer(entry.path())
    try:
        template = ChatTemplate(
            fallback_template(entry.architecture),
            bos_token=tokenizer.bos_token,
            eos_token=tokenizer.eos_token,
        )
        expected = len(tokenizer.tokenize(template.render(messages)))
    finally:
        tokenizer.close()
    req = request(
        input=[{"type": "message", "role": m.role, "content": m.content} for m in messages],
        max_output_tokens=2,
    )
    response = await service.complete(await service.start(req))
    assert response.usage is not None
    assert (
        response.usage.input_tokens,
        response.usage.output_tokens,
        response.usage.total_tokens,
    ) == (expected, 2, expected + 2)


async def test_prompt_plus_max_output_tokens_over_the_context_is_context_length_exceeded(
    small_engine: LocalEngine, entry: ModelEntry
) -> None:
    service = service_of(small_engine)
    prompt = await small_engine.render(entry, [ChatMessage(role="user", content="Hi")])
    assert small_engine.context_length(entry) == 64
    room = 64 - len(prompt.tokens)
    run = await service.start(request(max_output_tokens=room))
    assert len(run.prompt.tokens) + room == 64
    error = await refusal(service, request(max_output_tokens=room + 1))
    assert (error.code, error.status, error.param) == (
        "context_length_exceeded",
        400,
        "max_output_tokens",
    )


async def test_prompt_filling_the_context_is_context_length_exceeded_naming_input(
    small_engine: LocalEngine,
) -> None:
    service = service_of(small_engine)
    error = await refusal(service, request(input="one two three four five six seven " * 12))
    assert (error.code, error.status, error.param) == ("context_length_exceeded", 400, "input")


async def test_tool_parameters_the_decoder_cannot_enforce_are_invalid_request(
    service: ResponseService,
) -> None:
    parameters = {"type": "object", "properties": {"n": {"type": "integer"}}, "if": {}}
    tool = {"type": "function", "name": "get_weather", "parameters": parameters}
    error = await refusal(service, request(tools=[tool]))
    assert (error.code, error.status, error.param) == (
        "invalid_request",
        400,
        "tools[0].parameters",
    )


async def test_json_schema_the_decoder_cannot_enforce_is_invalid_request(
    service: ResponseService,
) -> None:
    schema = {"type": "object", "not": {"required": ["a"]}}
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    error = await refusal(service, request(response_format=fmt))
    assert (error.code, error.status, error.param) == ("invalid_request", 400, "response_format")


async def test_text_response_format_needs_no_capability(service: ResponseService) -> None:
    run = await service.start(request(response_format={"type": "text"}))
    assert run.status == "in_progress"


async def test_previous_response_id_is_unsupported_capability_naming_previous_response_id(
    service: ResponseService,
) -> None:
    error = await refusal(service, request(previous_response_id="resp_01J8M6Q4W2T7N5R3V9X1Z8B0DF"))
    assert (error.code, error.status, error.param) == (
        "unsupported_capability",
        400,
        "previous_response_id",
    )


async def test_unknown_model_is_model_not_found(service: ResponseService) -> None:
    error = await refusal(service, request(model="nope:1b"))
    assert (error.code, error.status, error.param) == ("model_not_found", 404, "model")


# --- conversation items ------------------------------------------------------------------------

CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
}


async def test_function_call_output_matching_no_call_is_invalid_request_naming_call_id() -> None:
    service = service_of(ScriptedEngine())
    req = request(
        input=[
            {"type": "message", "role": "user", "content": "Weather in Paris?"},
            CALL,
            {"type": "function_call_output", "call_id": "call_2", "output": "sunny"},
        ]
    )
    error = await refusal(service, req)
    assert (error.code, error.status, error.param) == ("invalid_request", 400, "input[2].call_id")


async def test_function_call_output_before_its_call_is_invalid_request() -> None:
    service = service_of(ScriptedEngine())
    req = request(
        input=[{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}, CALL]
    )
    error = await refusal(service, req)
    assert (error.code, error.param) == ("invalid_request", "input[0].call_id")


async def test_function_call_output_answering_an_earlier_call_is_accepted() -> None:
    engine = ScriptedEngine()
    service = service_of(engine)
    req = request(
        input=[
            {"type": "message", "role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Use the tool."}]},
            CALL,
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ]
    )
    run = await service.start(req)
    assert run.status == "in_progress"
    assert engine.prompts == [
        [
            ChatMessage(role="user", content="Weather in Paris?"),
            ChatMessage(
                role="assistant",
                content="",
                tool_calls=(
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    },
                ),
            ),
            ChatMessage(role="tool", content="sunny", tool_call_id="call_1"),
        ]
    ]


async def test_function_call_output_with_a_matching_call_runs_on_the_real_model(
    service: ResponseService,
) -> None:
    req = request(
        input=[
            {"type": "message", "role": "user", "content": "Weather in Paris?"},
            CALL,
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
        max_output_tokens=2,
    )
    response = await service.complete(await service.start(req))
    assert response.usage is not None
    assert response.usage.output_tokens == 2


# --- scripted engine ---------------------------------------------------------------------------


async def test_scripted_generation_that_stops_ends_completed() -> None:
    engine = ScriptedEngine(deltas=("Hel", "lo"))
    service = service_of(engine)
    run = await service.start(request(input="a b c"))
    events = await events_of(service, run)
    assert names(events) == message_events(2)
    assert [e.data.delta for e in events if isinstance(e.data, OutputTextDelta)] == ["Hel", "lo"]
    assert done_text(events) == "Hello"
    usage = Usage(input_tokens=4, output_tokens=2, total_tokens=6)
    assert events[-1].data.usage == usage  # type: ignore[union-attr]
    response = run.response()
    assert (response.status, response.usage, response.incomplete_details) == (
        "completed",
        usage,
        None,
    )
    assert response.output == [
        OutputMessage(id=response.output[0].id, content=[OutputText(text="Hello")])
    ]


async def test_failure_mid_stream_ends_with_one_response_failed_after_the_deltas() -> None:
    service = service_of(ScriptedEngine(deltas=("Hel", "lo", "!"), fail_after=2))
    run = await service.start(request())
    events = await events_of(service, run)
    assert names(events) == message_events(2, "response.failed")
    assert deltas(events) == "Hello" == done_text(events)
    assert [event.id for event in events] == list(range(1, 11))
    assert sum(event.is_final for event in events) == 1
    failed = events[-1].data
    assert isinstance(failed, ResponseFailed)
    assert (failed.response_id, failed.status) == (run.id, "failed")
    assert (failed.error.code, failed.error.status, failed.error.title) == (
        "generation_failed",
        500,
        "Generation failed",
    )
    assert run.status == "failed"
    response = run.response()
    assert response.status == "failed"
    assert response.error == failed.error


async def test_failure_before_any_delta_ends_with_response_failed_and_no_item() -> None:
    service = service_of(ScriptedEngine(fail_after=0))
    run = await service.start(request())
    events = await events_of(service, run)
    assert names(events) == [*START, "response.failed"]
    assert run.output == []


async def test_complete_of_a_failing_generation_raises_generation_failed() -> None:
    service = service_of(ScriptedEngine(fail_after=1))
    run = await service.start(request())
    with pytest.raises(LmspError) as info:
        await service.complete(run)
    assert (info.value.code, info.value.status) == ("generation_failed", 500)
    assert run.status == "failed"


async def test_cancelled_token_gives_output_item_done_then_response_cancelled() -> None:
    service = service_of(ScriptedEngine(deltas=("Hel", "lo")))
    run = await service.start(request())
    cancel = CancelToken()
    cancel.cancel()
    events = await events_of(service, run, cancel)
    assert names(events) == message_events(0, "response.cancelled")
    assert done_text(events) == ""
    cancelled = events[-1].data.model_dump()
    assert (cancelled["response_id"], cancelled["status"]) == (run.id, "cancelled")
    assert cancelled["response"]["status"] == "cancelled"
    assert run.status == "cancelled"
    assert run.response().status == "cancelled"


async def test_cancel_mid_stream_keeps_the_text_so_far_then_response_cancelled() -> None:
    service = service_of(ScriptedEngine(deltas=("Hel", "lo", "!")))
    run = await service.start(request())
    cancel = CancelToken()
    events: list[ResponseEvent] = []
    async for event in service.events(run, cancel):
        events.append(event)
        if event.event == DELTA:
            cancel.cancel()
    assert names(events) == message_events(1, "response.cancelled")
    assert done_text(events) == "Hel"
    assert run.status == "cancelled"


async def test_engine_error_while_rendering_is_generation_failed() -> None:
    failing = ScriptedEngine(render_error=EngineError("the prompt could not be tokenized"))
    error = await refusal(service_of(failing), request())
    assert (error.code, error.status) == ("generation_failed", 500)


async def test_a_tokenizer_that_cannot_be_loaded_is_engine_unavailable_without_retry_after() -> (
    None
):
    unloadable = ScriptedEngine(
        render_error=ModelLoadError("the tokenizer of x.gguf could not be loaded")
    )
    error = await refusal(service_of(unloadable), request())
    assert (error.code, error.status, error.retry_after) == ("engine_unavailable", 503, None)


async def test_weights_that_cannot_be_loaded_fail_the_response_as_engine_unavailable() -> None:
    service = service_of(ScriptedEngine(load_error=ModelLoadError("x.gguf could not be loaded")))
    run = await service.start(request())
    events = await events_of(service, run)
    assert names(events) == ["response.created", "response.failed"]
    failed = events[-1].data
    assert isinstance(failed, ResponseFailed)
    assert (failed.error.code, failed.error.status) == ("engine_unavailable", 503)
    assert failed.error.detail == "x.gguf could not be loaded"
    with pytest.raises(LmspError) as info:
        await service.complete(await service.start(request()))
    assert (info.value.code, info.value.retry_after) == ("engine_unavailable", None)


async def test_template_refusing_the_conversation_is_invalid_request_naming_input() -> None:
    refusing = ScriptedEngine(render_error=ChatTemplateError("Conversation roles must alternate"))
    error = await refusal(service_of(refusing), request())
    assert (error.code, error.status, error.param, error.detail) == (
        "invalid_request",
        400,
        "input",
        "Conversation roles must alternate",
    )
