"""``AnswerView``: where an ask shows itself, and the view of an answer nobody displays."""

from __future__ import annotations

from typing import Protocol

from ..protocol.events import ResponseEvent


class AnswerView(Protocol):
    """Where an ask shows itself: a notebook display with a widget, or a terminal."""

    def refresh(self) -> None:
        """The state changed at a moment the contract lists (never per token)."""

    def event(self, task_id: str, event: ResponseEvent) -> None:
        """A live event of the running round."""

    def redisplay(self) -> None:
        """Show the answer again (it was the value of a later cell)."""

    def waited(self) -> None:
        """A cell waited for the answer: the state it waited for should reach that cell."""


class Unseen:
    """The view of an answer nobody displays."""

    def refresh(self) -> None:
        """Nothing to show."""

    def event(self, task_id: str, event: ResponseEvent) -> None:
        """Nothing to show."""

    def redisplay(self) -> None:
        """Nothing to show."""

    def waited(self) -> None:
        """Nothing to show."""
