"""The service document and model objects (LMSP 1.0 section 8)."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, Field, model_serializer

Capability = Literal[
    "streaming", "tasks", "conversations", "tools", "structured_output", "reasoning"
]
#: ``embedding``: embeds texts (``/embeddings``, Ollama's ``/api/embed``).
#: ``fim``: fills in the middle of a Completions request's ``prompt`` and ``suffix`` (11.5).
ModelCapability = Literal[
    "streaming", "tools", "structured_output", "conversations", "reasoning", "fim", "embedding"
]
Scope = Literal[
    "models:read",
    "models:write",
    "responses:read",
    "responses:write",
    "tasks:read",
    "tasks:write",
    "tools:execute",
]
ModelStatus = Literal["available", "loading", "loaded", "unavailable"]
#: ``chat``: a model with a chat template, whose prompts are rendered through it; ``base``: a
#: model without one, whose prompt is the text as written (a conversation: a plain transcript).
ModelKind = Literal["chat", "base"]
#: The key of this service's own additions in ``extensions`` objects (LMSP 1.0 section 9.1).
EXTENSION_KEY: Final = "x-lmsp-jupyter"
#: What a key of an ``extensions`` object looks like: reverse-DNS or an ``x-`` name (9.1).
EXTENSION_KEY_PATTERN: Final = r"^(x-[A-Za-z0-9._-]+|[a-z0-9-]+(\.[a-z0-9-]+)+)$"
#: The model a request names, in every dialect.
ModelName = Annotated[str, Field(min_length=1, max_length=512)]

LMSP_VERSION = "1.0"


class ServiceInfo(BaseModel):
    """Name and version of the implementation."""

    name: str
    version: str


class AuthInfo(BaseModel):
    """How clients authenticate and which scopes exist."""

    type: Literal["bearer"] = "bearer"
    scopes: list[Scope]


class ServiceDocument(BaseModel):
    """``GET /lmsp/v1``: what this service is and can do."""

    object: Literal["service"] = "service"
    lmsp_version: str = LMSP_VERSION
    service: ServiceInfo
    capabilities: list[Capability]
    auth: AuthInfo


class LoadingProgress(BaseModel):
    """How far a model that is ``loading`` has come, for people watching it."""

    stage: str = Field(description="What is happening, in words (`assembling the GGUF file`).")
    fraction: float | None = Field(
        default=None, ge=0, le=1, description="Done so far, 0 to 1; `null` when unknown."
    )


class ModelExtension(BaseModel):
    """This service's additions to a model object, under ``extensions["x-lmsp-jupyter"]``;
    only those that are set are sent."""

    kind: ModelKind | None = Field(
        default=None,
        description="`chat`: the model has a chat template (in its GGUF, its Ollama manifest, "
        "or configured) and its prompts are rendered through it; `base`: it has none and "
        "continues the text as written (a conversation as a plain transcript). Absent for a "
        "model that only embeds.",
    )
    loading: LoadingProgress | None = None
    inexact: str | None = Field(
        default=None,
        description="Why the model's text at temperature 0 may depend on what else runs or was "
        "cached (llama.cpp's settings in this server's process); absent: it does not.",
    )

    @model_serializer(mode="wrap")
    def _set_fields_only(self, handler: Any) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {name: value for name, value in data.items() if value is not None}


class ModelListExtension(BaseModel):
    """This service's additions to the model list, under ``extensions["x-lmsp-jupyter"]``."""

    notices: list[str] = Field(
        description="Why configured model places give no model (a directory that does not "
        "exist or holds no GGUF file)."
    )


class Model(BaseModel):
    """A model the service can run.

    ``memory_bytes``, ``loaded_at`` and ``expires_at`` are sent only while it is loaded.
    """

    id: str
    object: Literal["model"] = "model"
    created: int = Field(0, description="Unix time the model file was written (11.4).")
    owned_by: str = "local"
    context_length: int
    capabilities: list[ModelCapability]
    status: ModelStatus
    #: The weights' file format; ``None`` for a model a remote server runs.
    format: Literal["gguf"] | None = "gguf"
    #: The weights' size on disk; ``None`` for a model a remote server runs.
    size_bytes: int | None
    memory_bytes: int | None = Field(
        default=None, description="Memory it takes while loaded: weights and KV cache."
    )
    loaded_at: int | None = Field(default=None, description="When it was loaded (Unix seconds).")
    expires_at: int | None = Field(
        default=None,
        description="When it will be unloaded if it stays idle (Unix seconds); `null`: never.",
    )
    extensions: dict[Literal["x-lmsp-jupyter"], ModelExtension] | None = None

    @model_serializer(mode="wrap")
    def _memory_fields_only_while_loaded(self, handler: Any) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.status != "loaded":
            for name in ("memory_bytes", "loaded_at", "expires_at"):
                data.pop(name, None)
        if self.extensions is None:
            data.pop("extensions", None)
        return data


class ModelList(BaseModel):
    """``GET /lmsp/v1/models``."""

    object: Literal["list"] = "list"
    data: list[Model]
    extensions: dict[Literal["x-lmsp-jupyter"], ModelListExtension] | None = None

    @model_serializer(mode="wrap")
    def _extensions_only_when_set(self, handler: Any) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.extensions is None:
            data.pop("extensions", None)
        return data
