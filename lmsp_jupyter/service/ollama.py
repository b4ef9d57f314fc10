"""The models of this service as Ollama lists, shows and reports them (``/api/tags``,
``/api/show``, ``/api/ps``), and Ollama's model names resolved to this service's ids."""

from __future__ import annotations

import hashlib

from ..engine.catalog import ModelEntry
from ..engine.embedding import embedding_window
from ..engine.scans import OLLAMA_PLAIN_TEMPLATE
from ..protocol.errors import LmspError
from ..protocol.models import Model
from ..protocol.ollama_answers import (
    OllamaCapability,
    OllamaListedModel,
    OllamaModelDetails,
    OllamaModelList,
    OllamaRunningList,
    OllamaRunningModel,
    OllamaShow,
    timestamp,
)
from .models import ModelDirectory

#: Ollama's implicit tag: ``llama3`` is ``llama3:latest``.
_LATEST = ":latest"
#: ``expires_at`` of a model that is not unloaded for being idle (as Ollama reports it).
_NEVER = 253402300799.0  # 9999-12-31T23:59:59Z


class OllamaModels:
    """Ollama's view of a :class:`ModelDirectory`."""

    def __init__(self, models: ModelDirectory) -> None:
        self.models = models

    def entry(self, name: str) -> ModelEntry:
        """The model Ollama's ``name`` means: the id itself, or the id without or with the
        implicit ``:latest``; unknown → ``model_not_found`` in Ollama's words."""
        candidates = [name]
        if name.endswith(_LATEST):
            candidates.append(name.removesuffix(_LATEST))
        elif ":" not in name.rpartition("/")[2]:
            candidates.append(name + _LATEST)
        for candidate in candidates:
            try:
                return self.models.entry(candidate)
            except LmspError as error:
                if error.code != "model_not_found":
                    raise
        raise LmspError("model_not_found", f"model '{name}' not found", param="model")

    def capabilities(self, entry: ModelEntry) -> list[OllamaCapability]:
        """What Ollama's clients look for: ``completion``, ``tools``, ``insert`` (fill in the
        middle: ``suffix``), ``thinking``, ``embedding``."""
        own = self.models.capabilities(entry)
        capabilities: list[OllamaCapability] = ["completion"] if "streaming" in own else []
        if "tools" in own:
            capabilities.append("tools")
        if "fim" in own:
            capabilities.append("insert")
        if "reasoning" in own:
            capabilities.append("thinking")
        if "embedding" in own:
            capabilities.append("embedding")
        return capabilities

    def thinks(self, entry: ModelEntry) -> bool:
        """Whether the model writes reasoning (Ollama's ``think``)."""
        return "reasoning" in self.models.capabilities(entry)

    def context_length(self, entry: ModelEntry, model: Model) -> int:
        """The window Ollama reports: a model that only embeds, the tokens a text may have
        (its own trained context, up to the embedding window); else the generation window."""
        if self.capabilities(entry) == ["embedding"]:
            return embedding_window(entry)
        return model.context_length

    def tags(self) -> OllamaModelList:
        """``/api/tags``: every model."""
        listed = []
        for entry in self.models.catalog.list():
            model = self.models.describe(entry)
            listed.append(
                OllamaListedModel(
                    name=entry.id,
                    model=entry.id,
                    modified_at=timestamp(model.created),
                    size=entry.size_bytes,
                    digest=_digest(entry),
                    details=_details(entry),
                )
            )
        return OllamaModelList(models=listed)

    def running(self) -> OllamaRunningList:
        """``/api/ps``: the models in memory."""
        running = []
        for entry in self.models.catalog.list():
            model = self.models.describe(entry)
            if model.status != "loaded":
                continue
            running.append(
                OllamaRunningModel(
                    name=entry.id,
                    model=entry.id,
                    size=model.memory_bytes or entry.size_bytes,
                    digest=_digest(entry),
                    details=_details(entry),
                    expires_at=timestamp(_expiry(model)),
                    context_length=self.context_length(entry, model),
                )
            )
        return OllamaRunningList(models=running)

    def show(self, name: str) -> OllamaShow:
        """``/api/show``: a model's template, details, ``model_info`` and capabilities."""
        entry = self.entry(name)
        model = self.models.describe(entry)
        architecture = entry.architecture or "unknown"
        return OllamaShow(
            template=_template(entry),
            details=_details(entry),
            model_info={
                "general.architecture": architecture,
                "general.basename": entry.id,
                "general.file_type": entry.quantization or "",
                f"{architecture}.context_length": self.context_length(entry, model),
            },
            capabilities=self.capabilities(entry),
            modified_at=timestamp(model.created),
        )


def _template(entry: ModelEntry) -> str:
    """A model's chat template; a base model's is Ollama's own for a model that has none,
    ``{{ .Prompt }}``: the prompt as it is."""
    if entry.kind == "base":
        return OLLAMA_PLAIN_TEMPLATE
    return entry.chat_template or entry.ollama_template or ""


def _details(entry: ModelEntry) -> OllamaModelDetails:
    family = entry.architecture or "unknown"
    return OllamaModelDetails(
        family=family,
        families=[family],
        quantization_level=(entry.quantization or "").upper(),
        format="gguf" if entry.source != "remote" else "",
    )


def _digest(entry: ModelEntry) -> str:
    """A stable stand-in for Ollama's manifest digest: clients only compare it."""
    return hashlib.sha256(f"{entry.id}\0{entry.size_bytes}".encode()).hexdigest()


def _expiry(model: Model) -> float:
    return _NEVER if model.expires_at is None else float(model.expires_at)
