"""An ask's rounds and tool loop, against a scripted client (edge cases the model cannot hit)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lmsp_jupyter.kernel.answer import Answer
from lmsp_jupyter.kernel.tools import DECLINED, Tool, tool
from lmsp_jupyter.protocol.items import OutputMessage, OutputText
from tests.kernel.fakes import RecordingView, ScriptedClient, Turn

ran: list[tuple[str, int]] = []


@tool
def weather(city: str, days: int = 1) -> str:
    """The weather."""
    ran.append((city, days))
    if city == "Oz":
        raise ValueError("no such city")
    return f"sunny in {city}"


@pytest.fixture(autouse=True)
def fresh_log() -> None:
    ran.clear()


def start(client: ScriptedClient, *tools: Tool, **kw: Any) -> tuple[Answer, RecordingView]:
    views: list[RecordingView] = []

    def view(answer: Answer) -> RecordingView:
        views.append(RecordingView(answer))
        return views[-1]

    request = {
        "model": "m",
        "input": "hi",
        "store": True,
        "tools": [t.definition() for t in tools],
        "tool_choice": "required",
    }
    answer = Answer(
        client,
        request,
        tools={t.name: t for t in tools},
        view=view,
        **kw,
    )
    return answer.start().wait(5), views[0]


def continuation(client: ScriptedClient, number: int) -> dict[str, Any]:
    """The request of round ``number`` (from 2), without the parts every round repeats."""
    request = client.requests[number - 1]
    assert request["tools"] == [weather.definition()]
    assert (request["model"], request["store"], request["tool_choice"]) == ("m", True, "auto")
    return {"input": request["input"], "previous_response_id": request["previous_response_id"]}


def test_text_output_and_response_of_a_plain_answer() -> None:
    answer, view = start(ScriptedClient([Turn(deltas=("Hel", "lo"))]))
    assert (answer.status, answer.task_id, answer.text) == ("completed", "task_1", "Hello")
    assert answer.output == [OutputMessage(id="msg_1", content=[OutputText(text="Hello")])]
    assert answer.response is not None and answer.response.id == "resp_1"
    # events that arrive all at once are a replay, not a generation: no decode time
    assert answer.state.rounds[0].seconds is None
    # the state is sent when the round starts and when it (and the ask) ends, not per token
    assert [(s["status"], s["rounds"][0]["response"] is None) for s in view.states] == [
        ("queued", True),
        ("completed", False),
    ]
    assert [event.event for _, event in view.events] == [
        "response.created",
        "response.output_item.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_item.done",
        "response.completed",
    ]


def test_approve_runs_the_function_and_continues_with_its_output() -> None:
    client = ScriptedClient(
        [Turn(calls=(("weather", '{"city": "Paris", "days": 2}'),)), Turn(deltas=("Nice.",))]
    )
    answer, view = start(client, weather)
    assert answer.status == "requires_action"
    assert ran == []
    assert answer.state.tool_calls["call_1_0"].decision == "pending"

    answer.approve()
    answer.wait(5)
    assert ran == [("Paris", 2)]
    assert continuation(client, 2) == {
        "input": [
            {"type": "function_call_output", "call_id": "call_1_0", "output": "sunny in Paris"}
        ],
        "previous_response_id": "resp_1",
    }
    assert (answer.status, answer.text, answer.task_id) == ("completed", "Nice.", "task_2")
    final = view.states[-1]
    assert [r["task_id"] for r in final["rounds"]] == ["task_1", "task_2"]
    assert final["tool_calls"] == {
        "call_1_0": {
            "name": "weather",
            "arguments": '{"city": "Paris", "days": 2}',
            "decision": "approved",
            "output": "sunny in Paris",
        }
    }


def test_deny_tells_the_model_the_user_declined() -> None:
    client = ScriptedClient([Turn(calls=(("weather", '{"city": "Paris"}'),)), Turn(deltas=("Ok",))])
    answer, _ = start(client, weather)
    answer.deny("call_1_0")
    answer.wait(5)
    assert ran == []
    assert continuation(client, 2)["input"] == [
        {"type": "function_call_output", "call_id": "call_1_0", "output": DECLINED}
    ]
    assert answer.state.tool_calls["call_1_0"].decision == "denied"


@pytest.mark.parametrize(
    ("arguments", "output"),
    [
        ('{"city": "Oz"}', "error: ValueError: no such city"),
        (
            '{"city": ',
            "error: the arguments are not valid JSON: Expecting value: line 1 column 10 (char 9)",
        ),
        (
            '{"city": "Paris", "sky": 1}',
            "error: the arguments do not fit weather: sky: Extra inputs are not permitted",
        ),
    ],
)
def test_failures_of_a_call_become_its_output(arguments: str, output: str) -> None:
    client = ScriptedClient([Turn(calls=(("weather", arguments),)), Turn(deltas=("Ok",))])
    answer, _ = start(client, weather)
    answer.approve("call_1_0")
    answer.wait(5)
    assert answer.status == "completed"
    assert continuation(client, 2)["input"][0]["output"] == output


def test_policy_always_runs_at_once_and_never_declines() -> None:
    always = tool(policy="always", name="now")(weather.function)
    never = tool(policy="never", name="later")(weather.function)
    client = ScriptedClient(
        [
            Turn(calls=(("now", '{"city": "Rome"}'), ("later", '{"city": "Oslo"}'))),
            Turn(deltas=("Ok",)),
        ]
    )
    answer, view = start(client, always, never)
    assert answer.status == "completed"
    assert ran == [("Rome", 1)]
    assert client.requests[1]["input"] == [
        {"type": "function_call_output", "call_id": "call_1_0", "output": "sunny in Rome"},
        {"type": "function_call_output", "call_id": "call_1_1", "output": DECLINED},
    ]
    decisions = {k: (v.decision, v.output) for k, v in answer.state.tool_calls.items()}
    assert decisions == {"call_1_0": ("auto", "sunny in Rome"), "call_1_1": ("denied", DECLINED)}
    assert "requires_action" not in [s["status"] for s in view.states]


def test_a_call_of_an_unknown_tool_is_denied_with_a_note() -> None:
    client = ScriptedClient([Turn(calls=(("ghost", "{}"),)), Turn(deltas=("Ok",))])
    answer, _ = start(client, weather)
    assert answer.state.tool_calls["call_1_0"].decision == "denied"
    assert client.requests[1]["input"][0]["output"] == "error: there is no tool named 'ghost'"


def test_the_ask_waits_until_every_call_of_the_round_is_decided() -> None:
    client = ScriptedClient(
        [
            Turn(calls=(("weather", '{"city": "A"}'), ("weather", '{"city": "B"}'))),
            Turn(deltas=("Ok",)),
        ]
    )
    answer, _ = start(client, weather)
    answer.approve("call_1_1")
    assert answer.status == "requires_action"
    assert len(client.requests) == 1
    answer.deny("call_1_0")
    answer.wait(5)
    assert [item["output"] for item in client.requests[1]["input"]] == [DECLINED, "sunny in B"]


def test_a_decided_call_cannot_be_decided_again() -> None:
    client = ScriptedClient([Turn(calls=(("weather", '{"city": "A"}'),)), Turn(deltas=("Ok",))])
    answer, _ = start(client, weather)
    answer.approve()
    with pytest.raises(ValueError, match=r"^no call 'call_1_0' waits for a decision$"):
        answer.approve("call_1_0")
    answer.handle_message({"type": "decide", "call_id": "call_1_0", "decision": "deny"})
    answer.wait(5)
    assert ran == [("A", 1)]
    assert answer.state.tool_calls["call_1_0"].decision == "approved"


def test_the_loop_stops_after_max_rounds_with_an_error() -> None:
    looping = tool(policy="always", name="weather")(weather.function)
    client = ScriptedClient([Turn(calls=(("weather", '{"city": "A"}'),))] * 3)
    answer, _ = start(client, looping, max_rounds=3)
    assert answer.status == "failed"
    assert len(client.requests) == 3
    assert answer.state.error == {
        "type": "about:blank",
        "title": "Too many tool rounds",
        "status": 500,
        "code": "tool_round_limit",
        "detail": "the model still called tools after 3 rounds",
    }


def test_stop_message_cancels_the_running_task() -> None:
    hold = threading.Event()
    client = ScriptedClient([Turn(deltas=("a",), hold=hold)])
    answer = Answer(client, {"model": "m", "input": "hi"}).start()
    answer.handle_message({"type": "stop"})
    answer.wait(5)
    assert client.cancelled == ["task_1"]
    assert (answer.status, answer.text) == ("cancelled", "a")


def test_cancel_while_waiting_for_a_decision_ends_the_ask() -> None:
    client = ScriptedClient([Turn(calls=(("weather", '{"city": "A"}'),))])
    answer, _ = start(client, weather)
    answer.cancel()
    assert answer.status == "cancelled"
    assert answer.state.tool_calls["call_1_0"].decision == "denied"
    assert len(client.requests) == 1
    assert ran == []


def test_wait_times_out() -> None:
    hold = threading.Event()
    answer = Answer(ScriptedClient([Turn(hold=hold)]), {"model": "m", "input": "hi"}).start()
    with pytest.raises(TimeoutError, match=r"^ask_\w+ still runs after 0.05 s$"):
        answer.wait(0.05)
    hold.set()
    assert answer.wait(5).status == "completed"


def test_events_after_gives_the_running_rounds_events_after_the_id() -> None:
    answer = Answer(ScriptedClient([Turn(deltas=("a", "b", "c"))]), {"model": "m", "input": "hi"})
    answer.start().wait(5)
    assert [e.id for e in answer.events_after("task_1", 3)] == [4, 5, 6, 7]
    assert answer.events_after("task_9", 0) == []
