"""A scripted engine for protocol edge cases the real model cannot be made to hit on demand."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from traitlets import Dict, Enum, Float, Instance, Int, List, Unicode
from traitlets.config import LoggingConfigurable

from lmsp_jupyter.engine import generation
from lmsp_jupyter.engine.backend import ModelsHeldElsewhere
from lmsp_jupyter.engine.catalog import ModelEntry
from lmsp_jupyter.engine.fim import raw_prompt_tokens
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings


class ScriptedEngine(ModelsHeldElsewhere, LoggingConfigurable):
    """Plays ``deltas`` (with ``delay`` seconds before each), then fails or finishes.

    A server configured with ``LmspApp.engine_class`` set to this class serves its local models
    with it; its traits are then set as ``ScriptedEngine.deltas`` and so on, and
    ``ScriptedEngine.then`` scripts the generations after the first. ``fail_after``: an
    ``EngineError`` after that many deltas. ``ending``: ``"done"`` (say how generation ended),
    ``"bug"`` (raise an exception that is not an ``EngineError``) or ``"silent"`` (stop without
    saying how generation ended).
    """

    deltas = List(Unicode(), default_value=["Hel", "lo"]).tag(config=True)
    delay = Float(0.0).tag(config=True)
    fail_after = Int(None, allow_none=True).tag(config=True)
    ending = Enum(["done", "bug", "silent"], default_value="done").tag(config=True)
    render_error = Instance(
        Exception,
        allow_none=True,
        help="Raised by render instead of rendering (a tokenizer that cannot load, a template).",
    )
    load_error = Instance(
        Exception, allow_none=True, help="Raised by load (weights that cannot be loaded)."
    )
    context_size = Int(4096).tag(config=True)
    slots = Int(1).tag(config=True)
    then = List(
        Dict(),
        help="The scripts of the next generations in turn, each a dict of deltas, delay and "
        "fail_after; the last one plays again from then on.",
    ).tag(config=True)

    def __init__(self, settings: EngineSettings | None = None, **kwargs: Any) -> None:
        """``settings`` is what tests give the local engine; a script ignores it."""
        super().__init__(**kwargs)
        #: The messages of every prompt rendered, in order.
        self.prompts: list[Sequence[generation.ChatMessage]] = []
        #: Every raw prompt rendered, in order.
        self.raw_prompts: list[generation.Prompt] = []
        #: The prompt of every generation, in the order they started.
        self.generated: list[generation.Prompt] = []
        self.generations = 0

    def script(self) -> tuple[Sequence[str], float, int | None]:
        """The deltas, delay and failure of the next generation (counted by the caller)."""
        if self.generations == 0 or not self.then:
            return self.deltas, self.delay, self.fail_after
        later = self.then[min(self.generations, len(self.then)) - 1]
        return later.get("deltas", self.deltas), later.get("delay", 0.0), later.get("fail_after")

    def context_length(self, entry: ModelEntry) -> int:
        return self.context_size

    def parallel(self, entry: ModelEntry) -> int:
        return self.slots

    async def load(self, entry: ModelEntry) -> None:
        if self.load_error is not None:
            raise self.load_error

    def thinks(self, entry: ModelEntry) -> bool:
        return False

    def close(self) -> None:
        pass

    async def render(
        self,
        entry: ModelEntry,
        messages: Sequence[generation.ChatMessage],
        tools: Sequence[object] = (),
        schema: dict[str, Any] | None = None,
    ) -> generation.Prompt:
        if self.render_error is not None:
            raise self.render_error
        self.prompts.append(messages)
        text = "\n".join(m.content for m in messages)
        return generation.Prompt(text=text, tokens=list(range(len(text.split()) + 1)))

    async def render_text(
        self, entry: ModelEntry, text: str, suffix: str | None = None
    ) -> generation.Prompt:
        """A raw prompt, a token a word, assembled as the real engine's (:mod:`.fim`)."""
        if self.render_error is not None:
            raise self.render_error

        def words(part: str) -> list[int]:
            return list(range(len(part.split())))

        tokens = raw_prompt_tokens(words, text, suffix, bos=None, fim=entry.fim)
        prompt = generation.Prompt(text=text, tokens=tokens, raw=True, suffix=suffix)
        self.raw_prompts.append(prompt)
        return prompt

    async def generate(
        self,
        entry: ModelEntry,
        prompt: generation.Prompt,
        params: generation.SamplingParams,
        cancel: generation.CancelToken,
    ) -> AsyncIterator[generation.GenerationEvent]:
        deltas, delay, fail_after = self.script()
        self.generations += 1
        self.generated.append(prompt)
        count = 0
        for delta in deltas:
            await asyncio.sleep(delay)
            if fail_after is not None and count >= fail_after:
                raise generation.EngineError("scripted failure")
            if cancel.cancelled:
                yield generation.GenerationDone("cancelled", len(prompt.tokens), count)
                return
            count += 1
            yield generation.TextDelta(delta)
        if self.ending == "bug":
            raise RuntimeError("a bug")
        if self.ending == "done":
            yield generation.GenerationDone("stop", len(prompt.tokens), count)
