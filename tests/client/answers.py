"""Small requests for the bundled model, and what tests check of the answers."""

from __future__ import annotations

from typing import Any

from lmsp_jupyter.client import ResponseEvent
from lmsp_jupyter.protocol.events import OutputTextDelta, ResponseCreated
from lmsp_jupyter.protocol.items import OutputMessage
from lmsp_jupyter.protocol.responses import Response
from tests.conftest import MODEL


def ask(prompt: str = "The capital of France is", **fields: Any) -> dict[str, Any]:
    """A small, deterministic request for the bundled model."""
    return {"model": MODEL, "input": prompt, "temperature": 0, "max_output_tokens": 8, **fields}


def text_of(response: Response) -> str:
    """The text of a response's messages."""
    return "".join(
        part.text
        for item in response.output
        if isinstance(item, OutputMessage)
        for part in item.content
    )


def deltas(events: list[ResponseEvent]) -> str:
    """The text the events' deltas add up to."""
    return "".join(e.data.delta for e in events if isinstance(e.data, OutputTextDelta))


def assert_one_final_at_the_end(events: list[ResponseEvent]) -> None:
    """Ids 1, 2, 3, ...; ``response.created`` first; exactly one final event, the last."""
    assert [event.id for event in events] == list(range(1, len(events) + 1))
    assert isinstance(events[0].data, ResponseCreated)
    assert [event.is_final for event in events] == [False] * (len(events) - 1) + [True]
