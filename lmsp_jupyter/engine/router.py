"""The one place that picks a model's engine: remote servers' models go to their server, the
others to the in-process llama.cpp engine."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Sequence
from typing import Any

from tornado.ioloop import PeriodicCallback
from traitlets import Dict, Float, List
from traitlets.config import LoggingConfigurable

from .backend import GenerationBackend, Messages, OutputSchema, Tools
from .catalog import ModelCatalog, ModelEntry
from .generation import CancelToken, GenerationEvent, Prompt, SamplingParams
from .remote import RemoteEngine, RemoteServer

#: How long a listing waits, at most, for a remote server's first answer, by default.
FIRST_LISTING_SECONDS = 5.0


class EngineRouter(LoggingConfigurable):
    """The models of the local catalog and of every remote server, each on its own engine.

    Implements both the model index and the engine interface the service uses. A model id
    ``<server>/<model>`` belongs to the remote server of that name, before any local model.
    ``LmspApp`` builds it with ``parent=app``: the remote servers are its settings
    (``EngineRouter.remote_servers``, ...).
    """

    remote_servers = List(
        Dict(),
        default_value=[],
        help="OpenAI-compatible servers (vLLM, llama-server, Ollama, LM Studio, SGLang) whose "
        "models are offered too, as '<name>/<model>': [{'name': 'gpu', 'url': "
        "'http://gpu-node:8000/v1', 'api_key_env': 'GPU_KEY'}]. Optional keys: 'api_key', "
        "'headers', 'timeout_seconds', 'models' (remote ids to offer, or {remote id: name}), "
        "'capabilities', 'context_length', 'structured_output' ('auto', 'json_schema' or "
        "'json_object'), 'retries'. See docs/scaling.md.",
    ).tag(config=True)

    refresh_seconds = Float(
        30.0,
        help="How often remote servers are asked for their models (and so whether they answer).",
    ).tag(config=True)

    first_listing_seconds = Float(
        FIRST_LISTING_SECONDS,
        help="How long a listing of the models waits, at most, for a remote server that has "
        "not answered yet (right after start-up): its models are listed once it answers.",
    ).tag(config=True)

    def __init__(
        self,
        local: GenerationBackend,
        catalog: ModelCatalog,
        remotes: Sequence[RemoteEngine] | None = None,
        **kwargs: Any,
    ) -> None:
        """Route to ``local`` and ``remotes`` (by default, those of ``remote_servers``; a bad
        entry raises ``ValueError``); ``kwargs`` are ``parent``, ``config``, ``log`` and
        traits."""
        super().__init__(**kwargs)
        if remotes is None:
            remotes = [RemoteEngine(RemoteServer.parse(config)) for config in self.remote_servers]
        names = [remote.server.name for remote in remotes]
        if len(set(names)) != len(names):
            raise ValueError(f"remote server names must differ: {names}")
        self.local = local
        self.catalog = catalog
        self.remotes = {remote.server.name: remote for remote in remotes}
        self._refresher: PeriodicCallback | None = None

    def start(self) -> None:
        """Ask the remote servers for their models every ``refresh_seconds`` (on the running
        IOLoop), when there are any."""
        if self.remotes and self._refresher is None:
            self._refresher = PeriodicCallback(self.refresh, self.refresh_seconds * 1000)
            self._refresher.start()

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

    def _stop(self) -> None:
        if self._refresher is not None:
            self._refresher.stop()

    def close(self) -> None:
        """Stop asking the remote servers for their models, and close every engine."""
        self._stop()
        self.local.close()
        for remote in self.remotes.values():
            remote.close()

    async def aclose(self) -> None:
        """Stop asking the remote servers for their models, and close every engine, waiting
        for the remote connections to close."""
        self._stop()
        self.local.close()
        await asyncio.gather(*(remote.aclose() for remote in self.remotes.values()))
