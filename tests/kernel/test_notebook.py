"""The notebook display of an ask: one display refreshed by id, widget events in batches."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

from lmsp_jupyter.kernel import notebook
from lmsp_jupyter.kernel.answer import Answer
from lmsp_jupyter.kernel.batcher import Batcher
from lmsp_jupyter.kernel.display import TASK_MIME, WIDGET_MIME
from lmsp_jupyter.kernel.notebook import NotebookView
from lmsp_jupyter.kernel.widget import AnswerWidget
from tests.helpers import eventually
from tests.kernel.fakes import ScriptedClient, Turn, note_call, note_tool


class Recorder:
    """What a notebook view publishes: displays and the widget's messages, with their times."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.displays: list[tuple[bool, str, dict[str, Any]]] = []
        self.messages: list[tuple[float, dict[str, Any]]] = []
        monkeypatch.setattr(notebook, "publish", self._publish)
        monkeypatch.setattr(AnswerWidget, "send", self._send)

    def _publish(self, bundle: dict[str, Any], display_id: str, *, update: bool = False) -> None:
        self.displays.append((update, display_id, bundle))

    def _send(self, content: dict[str, Any], buffers: Any = None) -> None:
        self.messages.append((time.monotonic(), content))

    def event_ids(self) -> list[int]:
        return [e["id"] for _, m in self.messages if m["type"] == "events" for e in m["events"]]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    return Recorder(monkeypatch)


def shown(client: ScriptedClient, **kw: Any) -> tuple[Answer, NotebookView]:
    views: list[NotebookView] = []

    def view(answer: Answer) -> NotebookView:
        views.append(NotebookView(answer))
        return views[-1]

    answer = Answer(
        client,
        {"model": "m", "input": "hi", "tools": [], "tool_choice": "auto"},
        view=view,
        **kw,
    )
    return answer.start(), views[0]


def click(widget: AnswerWidget, content: dict[str, Any]) -> None:
    """A custom message from the widget's view, as the comm delivers it."""
    widget._handle_msg(
        {"content": {"data": {"method": "custom", "content": content}}, "buffers": []}
    )


def test_events_go_out_in_batches_at_most_every_50_ms(recorder: Recorder) -> None:
    deltas = tuple(f"t{i} " for i in range(150))
    answer, view = shown(ScriptedClient([Turn(deltas=deltas, delay=0.002)]))
    answer.wait(60)
    batches = [(at, m) for at, m in recorder.messages if m["type"] == "events"]
    assert recorder.event_ids() == list(range(1, 150 + 5))  # every event once, in order
    # How many batches depends on how fast the machine streams; that they are batches at all,
    # and never closer than the interval, does not.
    assert len(batches) < len(deltas)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(batches)]
    assert min(gaps[:-1]) >= 0.049  # the last batch may be the flush at the round's end
    assert all(m["task_id"] == "task_1" for _, m in batches)
    assert view.widget.last_event_id == 150 + 4


def test_a_burst_is_sent_by_the_timer_without_a_later_event() -> None:
    sent: list[list[int]] = []
    batcher: Batcher[int] = Batcher(sent.append, interval=0.05)
    for item in range(5):
        batcher.add(item)
    assert sent == [[0]]
    eventually(lambda: len(sent) == 2, what="the timer's batch")
    assert sent == [[0], [1, 2, 3, 4]]


def test_the_display_is_sent_at_round_start_and_end_never_per_token(recorder: Recorder) -> None:
    answer, view = shown(ScriptedClient([Turn(deltas=("a",) * 50)]))
    answer.wait(5)
    assert [(update, display_id) for update, display_id, _ in recorder.displays] == [
        (False, view.display_id),
        (True, view.display_id),
    ]
    first, last = recorder.displays[0][2], recorder.displays[-1][2]
    assert list(last) == [WIDGET_MIME, TASK_MIME, "text/markdown", "text/plain"]
    assert last[WIDGET_MIME] == {
        "version_major": 2,
        "version_minor": 1,
        "model_id": view.widget.model_id,
    }
    assert first[TASK_MIME]["status"] == "queued"
    assert last[TASK_MIME] == answer.state_json() == view.widget.state
    assert last[TASK_MIME]["status"] == "completed"
    assert last["text/markdown"] == "a" * 50
    assert last["text/plain"] == "a" * 50 + "\n[completed] task_1"


def test_sync_answers_with_exactly_the_events_after_after(recorder: Recorder) -> None:
    hold = threading.Event()
    answer, view = shown(ScriptedClient([Turn(deltas=("a", "b", "c"), hold=hold)]))
    eventually(lambda: len(answer.events_after("task_1", 0)) >= 6, what="six events")
    recorder.messages.clear()
    click(view.widget, {"type": "sync", "task_id": "task_1", "after": 3})
    (reply,) = [m for _, m in recorder.messages]
    assert reply["type"] == "events" and reply["task_id"] == "task_1"
    delta = {"response_id": "resp_1", "item_id": "msg_1", "output_index": 0, "content_index": 0}
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "abc", "annotations": []}],
    }
    assert reply["events"] == [
        {"id": 4, "event": "response.output_text.delta", "data": {**delta, "delta": "b"}},
        {"id": 5, "event": "response.output_text.delta", "data": {**delta, "delta": "c"}},
        {
            "id": 6,
            "event": "response.output_item.done",
            "data": {"response_id": "resp_1", "output_index": 0, "item": message},
        },
    ]
    hold.set()
    answer.wait(5)


def test_stop_and_decide_clicks_reach_the_ask(recorder: Recorder) -> None:
    note, ran = note_tool()
    client = ScriptedClient([note_call("x"), Turn(deltas=("ok",), hold=threading.Event())])
    answer, view = shown(client, tools={"note": note})
    answer.wait(5)
    click(view.widget, {"type": "decide", "call_id": "call_1_0", "decision": "approve"})
    assert ran == ["x"]
    assert answer.task_id == "task_2"
    click(view.widget, {"type": "stop"})
    assert answer.wait(5).status == "cancelled"
    assert client.cancelled == ["task_2"]
    statuses = [b[TASK_MIME]["status"] for _, _, b in recorder.displays]
    assert statuses == [
        "queued",
        "requires_action",
        "in_progress",
        "in_progress",
        "queued",
        "cancelled",
    ]


def test_shown_again_in_a_later_cell_only(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notebook, "execution_count", lambda: 7)
    answer, view = shown(ScriptedClient([Turn(deltas=("a",))]))
    answer.wait(5)
    answer._ipython_display_()
    assert len(recorder.displays) == 2
    monkeypatch.setattr(notebook, "execution_count", lambda: 8)
    answer._ipython_display_()
    assert recorder.displays[-1][:2] == (False, view.display_id)
