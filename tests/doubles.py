"""A scripted engine for protocol edge cases the real model cannot be made to hit on demand."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmsp_jupyter.engine.catalog import ModelEntry
from lmsp_jupyter.engine.generation import (
    CancelToken,
    ChatMessage,
    EngineError,
    GenerationDone,
    GenerationEvent,
    Prompt,
    SamplingParams,
    TextDelta,
)


@dataclass
class ScriptedEngine:
    """Plays ``deltas`` (with ``delay`` seconds before each), then fails or finishes."""

    deltas: Sequence[str] = ("Hel", "lo")
    delay: float = 0.0
    fail_after: int | None = None
    context_size: int = 4096
    slots: int = 1
    prompts: list[Sequence[ChatMessage]] = field(default_factory=list)

    def context_length(self, entry: ModelEntry) -> int:
        return self.context_size

    def parallel(self, entry: ModelEntry) -> int:
        return self.slots

    def is_loaded(self, model_id: str) -> bool:
        return False

    def footprint(self, entry: ModelEntry) -> int:
        return 0

    async def load(self, entry: ModelEntry) -> None:
        pass

    async def unload(self, model_id: str) -> None:
        pass

    def thinks(self, entry: ModelEntry) -> bool:
        return False

    async def render(
        self,
        entry: ModelEntry,
        messages: Sequence[ChatMessage],
        tools: Sequence[object] = (),
        schema: dict[str, Any] | None = None,
    ) -> Prompt:
        self.prompts.append(messages)
        text = "\n".join(m.content for m in messages)
        return Prompt(text=text, tokens=list(range(len(text.split()) + 1)))

    async def generate(
        self, entry: ModelEntry, prompt: Prompt, params: SamplingParams, cancel: CancelToken
    ) -> AsyncIterator[GenerationEvent]:
        count = 0
        for delta in self.deltas:
            await asyncio.sleep(self.delay)
            if self.fail_after is not None and count >= self.fail_after:
                raise EngineError("scripted failure")
            if cancel.cancelled:
                yield GenerationDone("cancelled", len(prompt.tokens), count)
                return
            count += 1
            yield TextDelta(delta)
        yield GenerationDone("stop", len(prompt.tokens), count)
