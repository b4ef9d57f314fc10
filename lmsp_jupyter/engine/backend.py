"""The engine interface the service uses: one Protocol, implemented by every backend.

The in-process llama.cpp engine and remote OpenAI-compatible servers implement it; the
service never knows which one serves a model. A scripted double in the tests does too.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable

from .catalog import ModelEntry
from .generation import CancelToken, ChatMessage, GenerationEvent, Prompt, SamplingParams, ToolSpec

#: What a prompt is rendered from (``render``): the conversation, the tools
#: offered, and the JSON Schema decoding will hold the output to (``None``: free text).
Messages = Sequence[ChatMessage]
Tools = Sequence[ToolSpec]
OutputSchema = dict[str, Any] | None


class ModelIndex(Protocol):
    """Where model entries come from: the local catalog, remote servers, or both."""

    def list(self) -> list[ModelEntry]:
        """Every model offered."""
        ...

    def get(self, model_id: str) -> ModelEntry:
        """One model; unknown → ``LmspError("model_not_found")``."""
        ...

    def notices(self) -> builtins.list[str]:
        """Why configured places give no model."""
        ...

    async def first_listing(self) -> None:
        """Wait, a bounded time, for places being asked for their models for the first time."""
        ...


@runtime_checkable
class GenerationBackend(Protocol):
    """Renders prompts and generates for the models it serves.

    ``LmspApp.engine_class`` names the class of the in-process one: the app builds it as
    ``engine_class(parent=app, log=app.log)``, so that a ``LoggingConfigurable`` backend reads
    its own settings from the Jupyter config (as ``LocalEngine`` does).
    """

    def context_length(self, entry: ModelEntry) -> int:
        """The context window, in tokens, that requests for ``entry`` must fit in."""
        ...

    def parallel(self, entry: ModelEntry) -> int:
        """How many requests for ``entry`` generate at once; the service queues the rest."""
        ...

    def thinks(self, entry: ModelEntry) -> bool:
        """Whether ``entry`` writes reasoning between ``<think>`` tags."""
        ...

    def inexact(self, entry: ModelEntry) -> str | None:
        """Why ``entry``'s text at temperature 0 may depend on what else runs or was cached;
        ``None``: it does not, or this backend cannot say."""
        ...

    def is_loaded(self, model_id: str) -> bool:
        """Whether the model is ready to generate without loading first."""
        ...

    def footprint(self, entry: ModelEntry) -> int:
        """Bytes of memory ``entry`` takes once loaded (0 for a model served elsewhere)."""
        ...

    async def load(self, entry: ModelEntry) -> None:
        """Load ``entry`` now, so that its first generation does not wait (idempotent)."""
        ...

    async def unload(self, model_id: str) -> None:
        """Free what the model holds; called only while nothing runs or waits on it."""
        ...

    async def render(
        self, entry: ModelEntry, messages: Messages, tools: Tools = (), schema: OutputSchema = None
    ) -> Prompt:
        """The prompt for ``messages`` and ``tools``, checked before any generation; a
        ``schema`` (what ``SamplingParams.schema`` will enforce) the backend cannot enforce
        raises ``GrammarError``."""
        ...

    async def render_text(self, entry: ModelEntry, text: str, suffix: str | None = None) -> Prompt:
        """The prompt that continues ``text`` as it is, through no chat template (a ``raw``
        prompt); with a ``suffix``, one that fills the gap between them where the model can
        (:mod:`.fim`), else ``text`` alone."""
        ...

    def generate(
        self, entry: ModelEntry, prompt: Prompt, params: SamplingParams, cancel: CancelToken
    ) -> AsyncIterator[GenerationEvent]:
        """Generate from ``prompt``; the last event is a ``GenerationDone``. A consumer that
        stops iterating early, or ``cancel``, stops the generation at its next step."""
        ...

    def close(self) -> None:
        """Stop generating and free what the backend holds."""
        ...


class ModelsHeldElsewhere:
    """The part of :class:`GenerationBackend` a backend whose models another process holds (a
    remote server) answers alike: nothing is loaded, freed or kept in this process's memory,
    and how that process batches and caches is its own business."""

    def inexact(self, entry: ModelEntry) -> str | None:
        """Nothing to say: the other process batches as it will."""
        return None

    def is_loaded(self, model_id: str) -> bool:
        """Never: the other process owns its memory; its models are ``available``."""
        return False

    def footprint(self, entry: ModelEntry) -> int:
        """None of this process's memory."""
        return 0

    async def load(self, entry: ModelEntry) -> None:
        """Nothing to load here: the other process loads its models itself."""

    async def unload(self, model_id: str) -> None:
        """Nothing to free here."""
