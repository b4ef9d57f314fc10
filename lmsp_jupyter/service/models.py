"""The models this service offers, as LMSP model objects."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..engine.backend import GenerationBackend, ModelIndex
from ..engine.catalog import ModelEntry, bundled_progress
from ..engine.embedding import EMBEDDING_ARCHITECTURES
from ..engine.generation import EngineError
from ..engine.manager import ModelManager, Role
from ..protocol.models import (
    EXTENSION_KEY,
    LoadingProgress,
    Model,
    ModelCapability,
    ModelExtension,
    ModelList,
    ModelListExtension,
    ModelStatus,
)
from .engine_errors import engine_problem


class ModelDirectory:
    """Joins what the catalog finds (on disk, on remote servers) with what the manager holds
    in memory."""

    def __init__(
        self,
        catalog: ModelIndex,
        engine: GenerationBackend,
        manager: ModelManager | None = None,
        *,
        conversations: bool = False,
        embedding_pooling: Mapping[str, str] | None = None,
    ) -> None:
        self.catalog = catalog
        self.engine = engine
        self.manager = ModelManager(engine) if manager is None else manager
        self.conversations = conversations
        #: Generative models that also embed, with their pooling (``LmspApp.embedding_models``).
        self.embedding_pooling = dict(embedding_pooling or {})

    def entry(self, model_id: str) -> ModelEntry:
        """The catalog entry of ``model_id``; unknown → ``model_not_found``."""
        return self.catalog.get(model_id)

    def capabilities(self, entry: ModelEntry) -> list[ModelCapability]:
        """What ``entry`` can do through this service: its own capabilities (every local model's
        three, or a remote server's), conversations when responses are stored, reasoning, and
        ``fim`` for a local model whose GGUF names fill-in-the-middle tokens; ``embedding``
        alone for an embedding model, besides the others for one named in
        ``embedding_pooling``."""
        if entry.architecture in EMBEDDING_ARCHITECTURES:
            return ["embedding"]
        capabilities: list[ModelCapability] = [
            c
            for c in entry.capabilities or ("streaming", "tools", "structured_output")
            if c != "reasoning"
        ]
        if self.conversations:
            capabilities.append("conversations")
        if self.engine.thinks(entry):
            capabilities.append("reasoning")
        if entry.fim is not None:
            capabilities.append("fim")
        if entry.id in self.embedding_pooling:
            capabilities.append("embedding")
        return capabilities

    @staticmethod
    def _remote_status(entry: ModelEntry) -> ModelStatus:
        """A remote server's model: ``unavailable`` while the server does not answer."""
        return "available" if entry.available else "unavailable"

    def describe(self, entry: ModelEntry) -> Model:
        """The model object of ``entry``: its kind (chat or base), ``loading`` too while its GGUF
        file is assembled, and why its text at temperature 0 may vary where it may."""
        kind = None if self.capabilities(entry) == ["embedding"] else entry.kind
        if entry.source == "remote":  # the remote server owns its memory
            return Model(
                id=entry.id,
                owned_by=entry.owned_by,
                context_length=self.engine.context_length(entry),
                capabilities=self.capabilities(entry),
                status=self._remote_status(entry),
                format=None,
                size_bytes=None,
                extensions={EXTENSION_KEY: ModelExtension(kind=kind)},
            )
        state = self.manager.state(entry.id)
        assembly = bundled_progress() if entry.source == "bundled" else None
        own = ModelExtension(
            kind=kind,
            loading=LoadingProgress(stage=assembly.stage, fraction=assembly.fraction)
            if assembly is not None
            else None,
            inexact=self.engine.inexact(entry),
        )
        extensions = {EXTENSION_KEY: own} if kind or own.loading or own.inexact else None
        return Model(
            id=entry.id,
            created=_created(entry),
            owned_by=entry.owned_by,
            context_length=self.engine.context_length(entry),
            capabilities=self.capabilities(entry),
            status="loading" if assembly is not None else state.status if state else "available",
            size_bytes=entry.size_bytes,
            memory_bytes=state.memory_bytes if state else None,
            loaded_at=state.loaded_at if state else None,
            expires_at=state.expires_at if state else None,
            extensions=extensions,
        )

    def list(self) -> ModelList:
        """Every model found, and why configured directories give none."""
        notices = self.catalog.notices()
        return ModelList(
            data=[self.describe(entry) for entry in self.catalog.list()],
            extensions={EXTENSION_KEY: ModelListExtension(notices=notices)} if notices else None,
        )

    async def listing(self) -> ModelList:
        """:meth:`list`, once the places asked for the first time have answered (or a bounded
        wait has passed): the listing right after start-up shows remote servers' models."""
        await self.catalog.first_listing()
        return self.list()

    def get(self, model_id: str) -> Model:
        """One model; unknown → ``model_not_found``."""
        return self.describe(self.entry(model_id))

    async def load(self, model_id: str, keep_alive: float | None = None) -> Model:
        """Load a model now (``overloaded`` if it cannot fit, ``engine_unavailable`` if it
        cannot be loaded); the model once loaded, an embedding GGUF to embed. ``keep_alive``
        (seconds) replaces its default keep-alive once it is idle."""
        entry = self.entry(model_id)
        role: Role = "embedding" if entry.architecture in EMBEDDING_ARCHITECTURES else "generation"
        try:
            await self.manager.load(entry, keep_alive, role)
        except EngineError as exc:
            raise engine_problem(exc) from None
        return self.describe(entry)

    async def unload(self, model_id: str) -> Model:
        """Unload a model now (``model_busy`` while in use); the model afterwards."""
        entry = self.entry(model_id)
        await self.manager.unload(entry.id)
        return self.describe(entry)


def _created(entry: ModelEntry) -> int:
    """When the model's file was written; 0 while it has none yet (the bundled model)."""
    if isinstance(entry.location, Path) and entry.location.exists():
        return int(entry.location.stat().st_mtime)
    return 0
