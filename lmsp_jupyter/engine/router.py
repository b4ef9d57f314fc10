"""The one place that picks a model's engine: remote servers' models go to their server, the
others to the in-process llama.cpp engine."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Sequence

from .backend import GenerationBackend, Messages, OutputSchema, Tools
from .catalog import ModelCatalog, ModelEntry
from .generation import CancelToken, GenerationEvent, Prompt, SamplingParams
from .remote import RemoteEngine

#: How long a listing waits, at most, for a remote server's first answer (``LmspApp``'s default).
FIRST_LISTING_SECONDS = 5.0


class EngineRouter:
    """The models of the local catalog and of every remote server, each on its own engine.

    Implements both the model index and the engine interface the service uses. A model id
    ``<server>/<model>`` belongs to the remote server of that name, before any local model.
    """

    def __init__(
        self,
        local: GenerationBackend,
        catalog: ModelCatalog,
        remotes: Sequence[RemoteEngine] = (),
        *,
        first_listing_seconds: float = FIRST_LISTING_SECONDS,
    ) -> None:
        """Route to ``local`` and ``remotes``; a listing waits at most ``first_listing_seconds``
        for remote servers being asked for their models for the first time."""
        names = [remote.server.name for remote in remotes]
        if len(set(names)) != len(names):
            raise ValueError(f"remote server names must differ: {names}")
        self.local = local
        self.catalog = catalog
        self.remotes = {remote.server.name: remote for remote in remotes}
        self.first_listing_seconds = first_listing_seconds

    # --- the models -------------------------------------------------------------------------

    def list(self) -> list[ModelEntry]:
        """The local models, then each remote server's."""
        remote = [entry for server in self.remotes.values() for entry in server.list()]
        return [*self.catalog.list(), *remote]

    def get(self, model_id: str) -> ModelEntry:
        """One model; unknown → ``model_not_found``."""
        remote = self._remote_of(model_id)
        return remote.get(model_id) if remote is not None else self.catalog.get(model_id)

    def notices(self) -> builtins.list[str]:
        """Why configured model directories give no model."""
        return self.catalog.notices()

    async def first_listing(self) -> None:
        """Wait, at most ``first_listing_seconds``, for the remote servers that have not yet
        answered whether they have models: a listing right after start-up shows theirs."""
        within = self.first_listing_seconds
        await asyncio.gather(*(remote.first_listing(within) for remote in self.remotes.values()))

    async def refresh(self) -> None:
        """Ask every remote server for its models (and so whether it answers), together."""
        await asyncio.gather(*(remote.refresh() for remote in self.remotes.values()))

    def _remote_of(self, model_id: str) -> RemoteEngine | None:
        server, slash, _ = model_id.partition("/")
        return self.remotes.get(server) if slash else None

    def _engine(self, entry: ModelEntry) -> GenerationBackend:
        if entry.source == "remote":
            return self.remotes[entry.owned_by]
        return self.local

    # --- the engine interface, forwarded --------------------------------------------------------

    def context_length(self, entry: ModelEntry) -> int:
        """The context window of ``entry`` on its engine."""
        return self._engine(entry).context_length(entry)

    def parallel(self, entry: ModelEntry) -> int:
        """How many requests for ``entry`` its engine takes at once."""
        return self._engine(entry).parallel(entry)

    def thinks(self, entry: ModelEntry) -> bool:
        """Whether ``entry`` reasons between ``<think>`` tags."""
        return self._engine(entry).thinks(entry)

    def inexact(self, entry: ModelEntry) -> str | None:
        """Why ``entry``'s text at temperature 0 may vary, as its engine says."""
        return self._engine(entry).inexact(entry)

    def is_loaded(self, model_id: str) -> bool:
        """Whether the model is in this process's memory (a remote one never is)."""
        remote = self._remote_of(model_id)
        return remote.is_loaded(model_id) if remote is not None else self.local.is_loaded(model_id)

    def footprint(self, entry: ModelEntry) -> int:
        """Bytes of this process's memory ``entry`` takes once loaded (0 on a remote)."""
        return self._engine(entry).footprint(entry)

    async def load(self, entry: ModelEntry) -> None:
        """Load ``entry`` on its engine."""
        await self._engine(entry).load(entry)

    async def unload(self, model_id: str) -> None:
        """Unload the model from its engine."""
        remote = self._remote_of(model_id)
        await (remote.unload(model_id) if remote is not None else self.local.unload(model_id))

    async def render(
        self, entry: ModelEntry, messages: Messages, tools: Tools = (), schema: OutputSchema = None
    ) -> Prompt:
        """The prompt of ``entry``'s engine."""
        return await self._engine(entry).render(entry, messages, tools, schema)

    async def render_text(self, entry: ModelEntry, text: str, suffix: str | None = None) -> Prompt:
        """The raw prompt of ``entry``'s engine."""
        return await self._engine(entry).render_text(entry, text, suffix)

    def generate(
        self, entry: ModelEntry, prompt: Prompt, params: SamplingParams, cancel: CancelToken
    ) -> AsyncIterator[GenerationEvent]:
        """Generate on ``entry``'s engine."""
        return self._engine(entry).generate(entry, prompt, params, cancel)

    def close(self) -> None:
        """Close every engine."""
        self.local.close()
        for remote in self.remotes.values():
            remote.close()

    async def aclose(self) -> None:
        """Close every engine, waiting for the remote connections to close."""
        self.local.close()
        await asyncio.gather(*(remote.aclose() for remote in self.remotes.values()))
