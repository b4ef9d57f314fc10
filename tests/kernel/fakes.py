"""A scripted LMSP client for the kernel's edge cases, and a view that records what it is shown."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lmsp_jupyter.kernel.tools import Tool, tool
from lmsp_jupyter.protocol.events import (
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    ResponseCancelled,
    ResponseCompleted,
    ResponseCreated,
    ResponseEvent,
)
from lmsp_jupyter.protocol.items import OutputFunctionCall, OutputItem, OutputMessage, OutputText
from lmsp_jupyter.protocol.models import EXTENSION_KEY, Model, ModelExtension
from lmsp_jupyter.protocol.responses import Response, Usage
from lmsp_jupyter.protocol.tasks import Task

USAGE = Usage(input_tokens=5, output_tokens=3, total_tokens=8)


@dataclass
class Turn:
    """What the scripted model does in one round: text in ``deltas``, then function calls."""

    deltas: tuple[str, ...] = ()
    calls: tuple[tuple[str, str], ...] = ()  # (name, arguments)
    items: tuple[OutputItem, ...] = ()  # output items after the calls (MCP items)
    delay: float = 0.0  # seconds before each delta
    hold: threading.Event | None = None  # the round ends only once this is set (or cancelled)


def note_tool() -> tuple[Tool, list[str]]:
    """A ``note(text)`` tool that answers ``noted``, and the texts it has run with."""
    ran: list[str] = []

    @tool
    def note(text: str) -> str:
        ran.append(text)
        return "noted"

    return note, ran


def note_call(text: str) -> Turn:
    """A round in which the model calls ``note`` with ``text``."""
    return Turn(calls=(("note", json.dumps({"text": text})),))


@dataclass
class ScriptedClient:
    """Plays one :class:`Turn` per created task and records every request."""

    turns: list[Turn]
    requests: list[dict[str, Any]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    _results: dict[str, Response] = field(default_factory=dict)

    def models(self) -> list[Model]:
        return [
            Model(
                id="m",
                context_length=32,
                capabilities=["streaming"],
                status="available",
                size_bytes=1,
                extensions={EXTENSION_KEY: ModelExtension(kind="base")},
            ),
            Model(
                id="loaded",
                context_length=32,
                capabilities=["streaming", "tools"],
                status="loaded",
                size_bytes=1,
                extensions={EXTENSION_KEY: ModelExtension(kind="chat")},
            ),
        ]

    def create_task(self, request: Mapping[str, Any]) -> Task:
        self.requests.append(dict(request))
        number = len(self.requests)
        return Task(
            id=f"task_{number}", status="queued", created_at=0, response_id=f"resp_{number}"
        )

    def task_events(self, task_id: str, *, after: int | None = None) -> Iterator[ResponseEvent]:
        number = int(task_id.removeprefix("task_"))
        turn, response_id = self.turns[number - 1], f"resp_{number}"
        events = _Numbered()
        started = Response(id=response_id, created_at=0, status="in_progress", model="m")
        yield events.next(ResponseCreated(response_id=response_id, response=started))
        output: list[OutputItem] = []
        if turn.deltas:
            message = OutputMessage(id=f"msg_{number}")
            yield events.next(
                OutputItemAdded(response_id=response_id, output_index=0, item=message)
            )
            for delta in turn.deltas:
                time.sleep(turn.delay)
                yield events.next(
                    OutputTextDelta(
                        response_id=response_id,
                        item_id=message.id,
                        output_index=0,
                        content_index=0,
                        delta=delta,
                    )
                )
            message = OutputMessage(id=message.id, content=[OutputText(text="".join(turn.deltas))])
            output.append(message)
            yield events.next(OutputItemDone(response_id=response_id, output_index=0, item=message))
        for index, (name, arguments) in enumerate(turn.calls, len(output)):
            call = OutputFunctionCall(
                id=f"fc_{number}_{index}",
                call_id=f"call_{number}_{index}",
                name=name,
                arguments=arguments,
            )
            output.append(call)
            yield events.next(
                OutputItemDone(response_id=response_id, output_index=index, item=call)
            )
        for index, item in enumerate(turn.items, len(output)):
            output.append(item)
            yield events.next(
                OutputItemDone(response_id=response_id, output_index=index, item=item)
            )
        if turn.hold is not None:
            turn.hold.wait(10)
        status: Literal["cancelled", "completed"] = (
            "cancelled" if task_id in self.cancelled else "completed"
        )
        result = Response(
            id=response_id, created_at=0, status=status, model="m", output=output, usage=USAGE
        )
        if status == "cancelled":
            yield events.next(ResponseCancelled(response_id=response_id, response=result))
        else:
            yield events.next(
                ResponseCompleted(response_id=response_id, usage=USAGE, response=result)
            )
        self._results[task_id] = result

    def get_task(self, task_id: str) -> Task:
        result = self._results.get(task_id)
        return Task(
            id=task_id,
            status=result.status if result else "in_progress",
            created_at=0,
            response_id=task_id.replace("task", "resp"),
            result=result,
        )

    def list_tasks(self) -> list[Task]:
        return [self.get_task(f"task_{n}") for n in range(len(self.requests), 0, -1)]

    def cancel_task(self, task_id: str) -> Task:
        self.cancelled.append(task_id)
        number = int(task_id.removeprefix("task_"))
        hold = self.turns[number - 1].hold if number <= len(self.turns) else None
        if hold is not None:
            hold.set()
        return self.get_task(task_id)


class _Numbered:
    def __init__(self) -> None:
        self.last = 0

    def next(self, data: Any) -> ResponseEvent:
        self.last += 1
        return ResponseEvent(id=self.last, data=data)


@dataclass
class RecordingView:
    """Keeps every state it was shown and every event it got."""

    answer: Any
    states: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, ResponseEvent]] = field(default_factory=list)

    def refresh(self) -> None:
        self.states.append(self.answer.state_json())

    def event(self, task_id: str, event: ResponseEvent) -> None:
        self.events.append((task_id, event))

    def redisplay(self) -> None:
        self.states.append(self.answer.state_json())

    def waited(self) -> None:
        pass
