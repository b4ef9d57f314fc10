"""Tests of OutputBuilder: generated text → reasoning, message and function-call items, as events.

No model: the builder is fed text by hand, in chunks that split tags and JSON where they may.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from lmsp_jupyter.protocol import events as ev
from lmsp_jupyter.protocol.items import (
    OutputFunctionCall,
    OutputMessage,
    OutputReasoning,
    OutputText,
    SummaryText,
)
from lmsp_jupyter.protocol.requests import FunctionTool
from lmsp_jupyter.service.output import ContentMode, OutputBuilder

RESPONSE_ID = "resp_01J8M6Q4W2T7N5R3V9X1Z8B0DF"

ADDED = "response.output_item.added"
TEXT = "response.output_text.delta"
REASONING = "response.reasoning_summary_text.delta"
ARGUMENTS = "response.function_call_arguments.delta"
ARGUMENTS_DONE = "response.function_call_arguments.done"
DONE = "response.output_item.done"
PART_ADDED = "response.content_part.added"
TEXT_DONE = "response.output_text.done"
PART_DONE = "response.content_part.done"
#: A message's closing events, after its deltas.
MESSAGE_DONE = [TEXT_DONE, PART_DONE, DONE]

WEATHER = FunctionTool(
    type="function",
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def build(
    mode: ContentMode, chunks: Sequence[str], **options: Any
) -> tuple[OutputBuilder, list[ev.EventData]]:
    """Feed ``chunks`` to a new builder, then finish it; its events in order."""
    builder = OutputBuilder(RESPONSE_ID, mode, **options)
    events: list[ev.EventData] = []
    for chunk in chunks:
        events += builder.feed(chunk)
    events += builder.finish()
    return builder, events


def names(events: Sequence[ev.EventData]) -> list[str]:
    return [ev.EVENT_NAMES[type(event)] for event in events]


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def message_of(events: Sequence[ev.EventData]) -> tuple[ev.OutputItemAdded, str, ev.OutputItemDone]:
    """The one message's added event, its concatenated deltas and its done event."""
    (added,) = [e for e in events if isinstance(e, ev.OutputItemAdded)]
    (done,) = [e for e in events if isinstance(e, ev.OutputItemDone)]
    text = "".join(e.delta for e in events if isinstance(e, ev.OutputTextDelta))
    return added, text, done


# --- text --------------------------------------------------------------------------------------


def test_text_mode_gives_added_deltas_done_of_one_message_with_the_concatenated_text() -> None:
    builder, events = build(ContentMode.TEXT, ["Hel", "lo, ", "world", "!"])
    assert names(events) == [ADDED, PART_ADDED, TEXT, TEXT, TEXT, TEXT, *MESSAGE_DONE]
    added, text, done = message_of(events)
    assert isinstance(added.item, OutputMessage)
    assert added.item.id.startswith("msg_")
    assert (added.response_id, added.output_index, added.item.content) == (RESPONSE_ID, 0, [])
    assert added.item.status == "in_progress"
    assert {
        (e.output_index, e.content_index) for e in events if isinstance(e, ev.OutputTextDelta)
    } == {(0, 0)}
    assert [e.delta for e in events if isinstance(e, ev.OutputTextDelta)] == [
        "Hel",
        "lo, ",
        "world",
        "!",
    ]
    assert {e.item_id for e in events if isinstance(e, ev.OutputTextDelta)} == {added.item.id}
    assert text == "Hello, world!"
    assert done.output_index == 0
    assert done.item == OutputMessage(id=added.item.id, content=[OutputText(text=text)])
    assert builder.items == [done.item]
    assert builder.message_text == "Hello, world!"


def test_text_part_events_carry_the_part_and_the_whole_text() -> None:
    _, events = build(ContentMode.TEXT, ["a", "b"])
    part_added, text_done, part_done = events[1], events[-3], events[-2]
    assert isinstance(part_added, ev.ContentPartAdded) and part_added.part == OutputText(text="")
    assert isinstance(text_done, ev.OutputTextDone) and text_done.text == "ab"
    assert isinstance(part_done, ev.ContentPartDone) and part_done.part == OutputText(text="ab")
    assert {(e.output_index, e.content_index) for e in (part_added, text_done, part_done)} == {
        (0, 0)
    }


def test_items_cut_short_are_done_with_status_incomplete() -> None:
    builder = OutputBuilder(RESPONSE_ID, ContentMode.TEXT)
    builder.feed("Hel")
    (done,) = [e for e in builder.finish(incomplete=True) if isinstance(e, ev.OutputItemDone)]
    assert done.item.status == "incomplete"


def test_empty_generation_still_gives_one_message_with_empty_text() -> None:
    builder, events = build(ContentMode.TEXT, [])
    assert names(events) == [ADDED, PART_ADDED, *MESSAGE_DONE]
    added, text, done = message_of(events)
    assert text == ""
    assert done.item == OutputMessage(id=added.item.id, content=[OutputText(text="")])
    assert builder.message_text == ""


# --- reasoning ---------------------------------------------------------------------------------


def test_reasoning_between_think_tags_split_across_chunks_becomes_a_reasoning_item() -> None:
    chunks = ["<thi", "nk>pl", "an</th", "ink>\n\nAns", "wer"]
    builder, events = build(ContentMode.TEXT, chunks, reasoning=True)
    adds = [e for e in events if isinstance(e, ev.OutputItemAdded)]
    dones = [e for e in events if isinstance(e, ev.OutputItemDone)]
    assert [(e.output_index, e.item.type) for e in adds] == [(0, "reasoning"), (1, "message")]
    assert [(e.output_index, e.item.type) for e in dones] == [(0, "reasoning"), (1, "message")]
    reasoning_id, message_id = adds[0].item.id, adds[1].item.id
    assert reasoning_id is not None and reasoning_id.startswith("rs_")
    assert message_id is not None and message_id.startswith("msg_")
    summary = [e for e in events if isinstance(e, ev.ReasoningSummaryTextDelta)]
    assert "".join(e.delta for e in summary) == "plan"
    assert {e.item_id for e in summary} == {reasoning_id}
    # the reasoning item is done before the message starts
    assert names(events).index(DONE) < names(events).index(ADDED, 1)
    assert dones[0].item == OutputReasoning(id=reasoning_id, summary=[SummaryText(text="plan")])
    texts = [e for e in events if isinstance(e, ev.OutputTextDelta)]
    assert "".join(e.delta for e in texts) == "Answer"
    assert {e.item_id for e in texts} == {message_id}
    assert dones[1].item == OutputMessage(id=message_id, content=[OutputText(text="Answer")])
    assert builder.items == [dones[0].item, dones[1].item]
    assert builder.message_text == "Answer"


def test_reasoning_reported_apart_from_the_text_is_one_reasoning_item_before_the_message() -> None:
    builder = OutputBuilder(RESPONSE_ID, ContentMode.TEXT)  # no think tags expected
    events = [
        *builder.feed_reasoning("pl"),
        *builder.feed_reasoning("an"),
        *builder.feed("<think>Answer"),
        *builder.finish(),
    ]
    assert names(events) == [
        ADDED,
        "response.reasoning_summary_part.added",
        REASONING,
        REASONING,
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        DONE,
        ADDED,
        PART_ADDED,
        TEXT,
        *MESSAGE_DONE,
    ]
    reasoning, message = builder.items
    assert reasoning == OutputReasoning(id=reasoning.id, summary=[SummaryText(text="plan")])
    assert message == OutputMessage(id=message.id, content=[OutputText(text="<think>Answer")])


@pytest.mark.parametrize("size", [1, 2, 3, 5, 100])
def test_reasoning_split_is_the_same_whatever_the_chunk_size(size: int) -> None:
    builder, _ = build(
        ContentMode.TEXT, pieces("<think>plan</think>\n\nAnswer", size), reasoning=True
    )
    reasoning, message = builder.items
    assert isinstance(reasoning, OutputReasoning)
    assert reasoning.summary == [SummaryText(text="plan")]
    assert builder.message_text == "Answer"
    assert isinstance(message, OutputMessage)


def test_thinking_open_treats_text_up_to_the_closing_tag_as_reasoning() -> None:
    builder, events = build(
        ContentMode.TEXT,
        ["Let me ", "think.</th", "ink>\n\nDone."],
        reasoning=True,
        thinking_open=True,
    )
    assert names(events)[0] == ADDED
    reasoning, message = builder.items
    assert isinstance(reasoning, OutputReasoning)
    assert reasoning.summary == [SummaryText(text="Let me think.")]
    assert "".join(e.delta for e in events if isinstance(e, ev.ReasoningSummaryTextDelta)) == (
        "Let me think."
    )
    assert isinstance(message, OutputMessage)
    assert builder.message_text == "Done."


def test_without_reasoning_think_tags_stay_in_the_message_text() -> None:
    builder, events = build(ContentMode.TEXT, ["<think>x</think>y"], reasoning=False)
    assert names(events) == [ADDED, PART_ADDED, TEXT, *MESSAGE_DONE]
    assert not any(isinstance(e, ev.ReasoningSummaryTextDelta) for e in events)
    (message,) = builder.items
    assert isinstance(message, OutputMessage)
    assert builder.message_text == "<think>x</think>y"


def test_reasoning_enabled_but_no_think_tag_is_all_message_text() -> None:
    builder, _ = build(ContentMode.TEXT, ["<", "b>bold</b>"], reasoning=True)
    (message,) = builder.items
    assert isinstance(message, OutputMessage)
    assert builder.message_text == "<b>bold</b>"


# --- forced call -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_forced_call_streams_argument_deltas_that_concatenate_to_the_call_arguments(
    size: int,
) -> None:
    builder, events = build(ContentMode.FORCED_CALL, pieces(CALL, size), tools=[WEATHER])
    count = len(events) - 3
    assert count >= 1
    assert names(events) == [ADDED] + [ARGUMENTS] * count + [ARGUMENTS_DONE, DONE]
    added, arguments_done, done = events[0], events[-2], events[-1]
    assert isinstance(arguments_done, ev.FunctionCallArgumentsDone)
    assert isinstance(added, ev.OutputItemAdded) and isinstance(done, ev.OutputItemDone)
    call = added.item
    assert isinstance(call, OutputFunctionCall)
    assert call.name == "get_weather"
    assert call.id.startswith("fc_")
    assert call.call_id.startswith("call_")
    assert (added.output_index, done.output_index) == (0, 0)
    final = done.item
    assert isinstance(final, OutputFunctionCall)
    assert (final.id, final.call_id, final.name) == (call.id, call.call_id, "get_weather")
    arguments = [e for e in events if isinstance(e, ev.FunctionCallArgumentsDelta)]
    assert {e.item_id for e in arguments} == {call.id}
    assert "".join(e.delta for e in arguments) == final.arguments
    assert {e.output_index for e in arguments} == {0}
    assert (arguments_done.name, arguments_done.arguments) == ("get_weather", final.arguments)
    assert json.loads(final.arguments) == {"city": "Paris"}
    assert builder.items == [final]
    assert builder.message_text is None


def test_forced_call_arguments_are_the_object_text_when_fed_whole() -> None:
    builder, _ = build(ContentMode.FORCED_CALL, [CALL], tools=[WEATHER])
    (call,) = builder.items
    assert isinstance(call, OutputFunctionCall)
    assert call.arguments == '{"city": "Paris"}'


@pytest.mark.parametrize("size", [1, 3])
def test_forced_call_arguments_are_exactly_the_object_text_whatever_the_chunking(
    size: int,
) -> None:
    builder, events = build(ContentMode.FORCED_CALL, pieces(CALL, size), tools=[WEATHER])
    (call,) = builder.items
    assert isinstance(call, OutputFunctionCall)
    assert call.arguments == '{"city": "Paris"}'
    deltas = "".join(e.delta for e in events if isinstance(e, ev.FunctionCallArgumentsDelta))
    assert deltas == '{"city": "Paris"}'


def test_forced_call_with_nested_braces_keeps_the_inner_closing_braces() -> None:
    text = '{"name": "f", "arguments": {"a": {"b": [1, {"c": 2}]}}} '
    _, events = build(ContentMode.FORCED_CALL, pieces(text, 2))
    (done,) = [e for e in events if isinstance(e, ev.OutputItemDone)]
    assert isinstance(done.item, OutputFunctionCall)
    assert json.loads(done.item.arguments) == {"a": {"b": [1, {"c": 2}]}}
    deltas = "".join(e.delta for e in events if isinstance(e, ev.FunctionCallArgumentsDelta))
    assert deltas == done.item.arguments


# --- auto --------------------------------------------------------------------------------------


def test_auto_plain_answer_streams_as_message_text() -> None:
    builder, events = build(ContentMode.AUTO, ["It is ", "sunny ", "in Paris."], tools=[WEATHER])
    assert names(events) == [ADDED, PART_ADDED, TEXT, TEXT, TEXT, *MESSAGE_DONE]
    _, text, done = message_of(events)
    assert text == "It is sunny in Paris."
    assert done.item.type == "message"
    assert builder.message_text == "It is sunny in Paris."


def test_auto_hermes_call_of_a_known_tool_becomes_a_function_call_item() -> None:
    text = f"<tool_call>{CALL}</tool_call>"
    builder, events = build(ContentMode.AUTO, pieces(text, 4), tools=[WEATHER])
    assert names(events) == [ADDED, ARGUMENTS, ARGUMENTS_DONE, DONE]
    assert not any(isinstance(e, ev.OutputTextDelta) for e in events)
    (call,) = builder.items
    assert isinstance(call, OutputFunctionCall)
    assert call.name == "get_weather"
    assert call.id.startswith("fc_") and call.call_id.startswith("call_")
    assert json.loads(call.arguments) == {"city": "Paris"}
    delta = events[1]
    assert isinstance(delta, ev.FunctionCallArgumentsDelta)
    assert (delta.item_id, delta.delta) == (call.id, call.arguments)


@pytest.mark.parametrize(
    "call",
    [
        '{"name": "get_time", "arguments": {"city": "Paris"}}',
        '{"name": "get_weather", "arguments": {"town": "Paris"}}',
        '{"name": "get_weather", "arguments": {"city": 75}}',
    ],
    ids=["unknown_tool", "unknown_argument", "wrong_argument_type"],
)
def test_auto_call_that_does_not_validate_falls_back_to_one_message_of_the_whole_text(
    call: str,
) -> None:
    text = f"<tool_call>{call}</tool_call>"
    builder, events = build(ContentMode.AUTO, pieces(text, 5), tools=[WEATHER])
    assert not any(isinstance(e, ev.FunctionCallArgumentsDelta) for e in events)
    _, streamed, done = message_of(events)
    assert streamed == text
    assert done.item.type == "message"
    assert builder.message_text == text


def test_at_most_max_calls_native_calls_become_items() -> None:
    text = f"<tool_call>{CALL}</tool_call>\n<tool_call>{CALL}</tool_call>"
    builder, _ = build(ContentMode.AUTO, [text], tools=[WEATHER])
    assert [item.type for item in builder.items] == ["function_call", "function_call"]
    builder, _ = build(ContentMode.AUTO, [text], tools=[WEATHER], max_calls=1)
    assert [item.type for item in builder.items] == ["function_call"]


def test_reasoning_gets_summary_part_events_around_its_deltas() -> None:
    builder, events = build(ContentMode.TEXT, ["<think>", "plan", "</think>", "x"], reasoning=True)
    assert names(events)[:6] == [
        ADDED,
        "response.reasoning_summary_part.added",
        REASONING,
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        DONE,
    ]
    assert builder.reasoning_tokens == 3  # the tags count, the answer's "x" does not
