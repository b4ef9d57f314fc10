"""``AnswerWidget``: the anywidget model of one ask, its live events and its clicks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import anywidget
import traitlets

from ..protocol.events import ResponseEvent

#: The view's ES module, built from ``labextension/src`` into the package.
WIDGET_ESM = Path(__file__).parent.parent / "static" / "widget.js"

# Without the built module the widget still opens, and says what is missing.
_UNBUILT_ESM = """export default { render({ el }) {
  el.textContent = "lmsp-jupyter: static/widget.js is not built; see the text output.";
} };
"""


class AnswerControls(Protocol):
    """What the widget's messages act on: the ask it shows."""

    def events_after(self, task_id: str, after: int) -> list[ResponseEvent]: ...

    def handle_message(self, message: dict[str, Any]) -> None: ...


def event_json(event: ResponseEvent) -> dict[str, Any]:
    """An event as the view receives it: ``id``, ``event`` and ``data``."""
    return {"id": event.id, "event": event.event, "data": event.data.model_dump(mode="json")}


class AnswerWidget(anywidget.AnyWidget):
    """The widget view of an ask: ``state`` (AnswerState), ``last_event_id``, event messages."""

    _esm = WIDGET_ESM if WIDGET_ESM.exists() else _UNBUILT_ESM

    state = traitlets.Dict().tag(sync=True)
    last_event_id = traitlets.Int(0).tag(sync=True)

    def __init__(self, controls: AnswerControls, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._controls = controls
        self.on_msg(self._on_message)

    def view_json(self) -> dict[str, Any]:
        """The ``application/vnd.jupyter.widget-view+json`` data that shows this widget."""
        return {"version_major": 2, "version_minor": 1, "model_id": self.model_id}

    def send_events(self, task_id: str, events: list[ResponseEvent]) -> None:
        """One ``events`` message with ``events`` of the round ``task_id``."""
        self.send({"type": "events", "task_id": task_id, "events": [event_json(e) for e in events]})

    def _on_message(self, widget: object, content: Any, buffers: object) -> None:
        if not isinstance(content, dict):
            return
        if content.get("type") == "sync":
            task_id, after = str(content.get("task_id")), content.get("after")
            after = after if isinstance(after, int) else 0
            self.send_events(task_id, self._controls.events_after(task_id, after))
        else:
            self._controls.handle_message(content)
