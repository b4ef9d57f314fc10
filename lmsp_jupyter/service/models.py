"""The models this service offers, as LMSP model objects."""

from __future__ import annotations

from ..engine.backend import GenerationBackend
from ..engine.catalog import ModelCatalog, ModelEntry
from ..protocol.models import Model, ModelCapability


class ModelDirectory:
    """Joins what the catalog finds on disk with what the engine has loaded."""

    def __init__(
        self, catalog: ModelCatalog, engine: GenerationBackend, *, conversations: bool = False
    ) -> None:
        self.catalog = catalog
        self.engine = engine
        self.conversations = conversations

    def entry(self, model_id: str) -> ModelEntry:
        """The catalog entry of ``model_id``; unknown → ``model_not_found``."""
        return self.catalog.get(model_id)

    def capabilities(self, entry: ModelEntry) -> list[ModelCapability]:
        """What ``entry`` can do through this service."""
        capabilities: list[ModelCapability] = ["streaming", "tools", "structured_output"]
        if self.conversations:
            capabilities.append("conversations")
        if self.engine.thinks(entry):
            capabilities.append("reasoning")
        return capabilities

    def describe(self, entry: ModelEntry) -> Model:
        """The model object of ``entry``."""
        return Model(
            id=entry.id,
            context_length=self.engine.context_length(entry),
            capabilities=self.capabilities(entry),
            status="loaded" if self.engine.is_loaded(entry.id) else "available",
            size_bytes=entry.size_bytes,
        )

    def list(self) -> list[Model]:
        """Every model found."""
        return [self.describe(entry) for entry in self.catalog.list()]

    def get(self, model_id: str) -> Model:
        """One model; unknown → ``model_not_found``."""
        return self.describe(self.entry(model_id))
