"""The service document and model objects (LMSP 1.0 section 8)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

Capability = Literal[
    "streaming", "tasks", "conversations", "tools", "structured_output", "reasoning"
]
ModelCapability = Literal["streaming", "tools", "structured_output", "conversations", "reasoning"]
Scope = Literal[
    "models:read", "responses:read", "responses:write", "tasks:read", "tasks:write", "tools:execute"
]

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


class Model(BaseModel):
    """A model the service can run."""

    id: str
    object: Literal["model"] = "model"
    owned_by: str = "local"
    context_length: int
    capabilities: list[ModelCapability]
    status: Literal["available", "loaded"]
    format: Literal["gguf"] = "gguf"
    size_bytes: int


class ModelList(BaseModel):
    """``GET /lmsp/v1/models``."""

    object: Literal["list"] = "list"
    data: list[Model]
