"""A strict reader of the SSE streams the tests receive."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass
class Event:
    """One server-sent event."""

    id: int
    event: str
    data: dict[str, Any]


def parse_sse(lines: Iterable[str]) -> tuple[list[Event], list[str]]:
    """Events and comments of a stream; every event must have an id, a name and one data line.

    No frame goes without data (11.4): a blank line only ever ends an event, the first event's
    frame carries ``retry: 2000`` (so browsers reconnect) and no other frame does, and a comment
    (keep-alive) is a line alone.
    """
    events: list[Event] = []
    comments: list[str] = []
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            assert fields, "a blank line that ends no event"
            if not events:
                assert fields.pop("retry", None) == "2000", "the first event must carry retry"
            assert set(fields) == {"id", "event", "data"}, fields
            events.append(Event(int(fields["id"]), fields["event"], json.loads(fields["data"])))
            fields = {}
        elif line.startswith(":"):
            assert not fields, "a comment inside an event"
            comments.append(line)
        else:
            name, _, value = line.partition(": ")
            assert name not in fields, f"repeated field {name}"
            fields[name] = value
    assert not fields, "stream ended inside an event"
    return events, comments
