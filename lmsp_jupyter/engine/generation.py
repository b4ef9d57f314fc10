"""What the engine takes and yields: prompts, sampling settings, generation events."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class ChatMessage:
    """One turn of a conversation, as chat templates see it."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt and its tokens."""

    text: str
    tokens: list[int] = field(repr=False)


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens: ``temperature`` 0 is greedy; ``None`` is the engine's default."""

    max_tokens: int
    temperature: float | None = None


@dataclass(frozen=True)
class TextDelta:
    """Text the model produced since the last event."""

    text: str


StopReason = Literal["stop", "max_tokens", "context_length", "cancelled"]


@dataclass(frozen=True)
class GenerationDone:
    """Generation ended; always the last event."""

    reason: StopReason
    prompt_tokens: int
    output_tokens: int


GenerationEvent = TextDelta | GenerationDone


class EngineError(Exception):
    """The model could not be loaded or failed while generating."""


class CancelToken:
    """A flag the generating thread checks between tokens."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask generation to stop after the current token."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether cancellation was asked for."""
        return self._event.is_set()
