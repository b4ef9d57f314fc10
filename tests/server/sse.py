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

    The stream must open with ``retry: 2000`` (so browsers reconnect) and say it only there.
    """
    events: list[Event] = []
    comments: list[str] = []
    fields: dict[str, str] = {}
    iterator = iter(lines)
    assert [next(iterator), next(iterator)] == ["retry: 2000", ""]
    for line in iterator:
        if line == "":
            if fields:
                assert set(fields) == {"id", "event", "data"}, fields
                events.append(Event(int(fields["id"]), fields["event"], json.loads(fields["data"])))
                fields = {}
        elif line.startswith(":"):
            comments.append(line)
        else:
            name, _, value = line.partition(": ")
            assert name not in fields, f"repeated field {name}"
            fields[name] = value
    assert not fields, "stream ended inside an event"
    return events, comments
