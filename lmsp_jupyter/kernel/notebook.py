"""How an ask shows in a notebook: one display refreshed by id, and a widget fed in batches."""

from __future__ import annotations

import itertools
import threading
import uuid
from typing import TYPE_CHECKING, Any

from ..protocol.events import ResponseEvent
from .batcher import Batcher
from .display import TASK_MIME, WIDGET_MIME, execution_count, publish, text_bundle
from .widget import AnswerWidget

if TYPE_CHECKING:
    from .answer import Answer


class NotebookView:
    """Shows an ask as one display (``display_id``) whose first part is an ``AnswerWidget``.

    The display is sent again only at the contract's moments; live events go to the widget
    in batches, at most one message per 50 ms.
    """

    def __init__(self, answer: Answer) -> None:
        self._answer = answer
        self.display_id = uuid.uuid4().hex
        self.widget = AnswerWidget(answer)
        self._batcher: Batcher[tuple[str, ResponseEvent]] = Batcher(self._send)
        self._lock = threading.Lock()
        self._shown = False
        self._shown_in: int | None = None
        self._round: str | None = None

    def refresh(self) -> None:
        """Send the state: the first time as a new display, then as an update of it."""
        with self._lock:  # two threads' refreshes must not overtake each other
            self._batcher.flush()  # the view gets every event before the state that follows
            if not self._shown:
                self._shown_in = execution_count()
            publish(self._bundle(), self.display_id, update=self._shown)
            self._shown = True

    def event(self, task_id: str, event: ResponseEvent) -> None:
        """Queue a live event for the widget."""
        self._batcher.add((task_id, event))

    def redisplay(self) -> None:
        """Show the display again, unless this is the cell that just showed it."""
        if execution_count() != self._shown_in:
            publish(self._bundle(), self.display_id)

    def waited(self) -> None:
        """Update the display again from a later cell that waited for the answer.

        A headless runner (nbclient, nbconvert) reads only the messages of the cell it runs,
        so without this the saved notebook would keep the state of the asking cell's time.
        """
        if execution_count() != self._shown_in:
            self.refresh()

    def _bundle(self) -> dict[str, Any]:
        bundle = text_bundle(self._answer)
        if self._round != self._answer.task_id:  # a new round: its events start at 1
            self._round = self._answer.task_id
            self.widget.last_event_id = 0
        self.widget.state = bundle[TASK_MIME]
        return {WIDGET_MIME: self.widget.view_json(), **bundle}

    def _send(self, batch: list[tuple[str, ResponseEvent]]) -> None:
        for task_id, group in itertools.groupby(batch, key=lambda pair: pair[0]):
            events = [event for _, event in group]
            self.widget.send_events(task_id, events)
            self.widget.last_event_id = events[-1].id
