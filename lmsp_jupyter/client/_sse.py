"""An incremental parser of ``text/event-stream`` (the WHATWG HTML "server-sent events" rules).

It is generic: it knows fields, not LMSP event names. Feed it the bytes of one connection in
chunks of any size; it returns the events each chunk completes.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_BOM = "\ufeff"
_LINE_END = re.compile("[\r\n]")


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event: its type, its data and the stream's last event id at that point."""

    event: str
    data: str
    id: str


class SseParser:
    """Turns the bytes of one ``text/event-stream`` into events, chunk by chunk."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = False  # whether the stream's first character (a possible BOM) was seen
        self._line = ""  # the current line, not yet ended
        self._after_cr = False  # a CR ended the last line: an LF right after it belongs to it
        self._event = ""
        self._data: list[str] = []
        self._id_buffer = ""
        #: The id of the last dispatched event, kept until the stream sets another.
        self.last_event_id = ""
        #: The reconnection time the stream asked for (``retry:``), in milliseconds.
        self.retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Parse ``chunk``; return the events it completes, in order."""
        text = self._decoder.decode(chunk)
        if not self._started and text:
            self._started = True
            text = text.removeprefix(_BOM)
        events: list[ServerSentEvent] = []
        start = 0
        for match in _LINE_END.finditer(text):
            index, char = match.start(), match[0]
            if char == "\n" and self._after_cr and index == start:
                self._after_cr = False
                start = index + 1
                continue
            self._line += text[start:index]
            start = index + 1
            self._after_cr = char == "\r"
            event = self._process(self._line)
            self._line = ""
            if event is not None:
                events.append(event)
        if start < len(text):
            self._after_cr = False
            self._line += text[start:]
        return events

    def _process(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id_buffer = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        self.last_event_id = self._id_buffer
        event, data = self._event or "message", self._data
        self._event, self._data = "", []
        if not data:
            return None
        return ServerSentEvent(event=event, data="\n".join(data), id=self.last_event_id)
