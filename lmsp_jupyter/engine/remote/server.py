"""The configuration of one remote server: an entry of ``EngineRouter.remote_servers``."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...protocol.models import ModelCapability

#: Seconds before the n-th retry of a request nothing has come back for yet.
RETRY_DELAYS = (0.25, 1.0, 2.0)

StructuredOutput = Literal["auto", "json_schema", "json_object"]


class RemoteServer(BaseModel):
    """One entry of ``EngineRouter.remote_servers``: an OpenAI-compatible server and its models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Prefix of its models' ids (``<name>/<model>``) and their ``owned_by``.
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    #: The API root, ending where OpenAI's ``/models`` and ``/chat/completions`` start.
    url: str = Field(pattern=r"^https?://")
    api_key: str | None = None
    #: The environment variable holding the API key (kept out of configuration files).
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    #: Longest wait for the server to say anything (the first token included).
    timeout_seconds: float = Field(default=600.0, gt=0)
    #: The models offered: remote ids, or ``{remote id: name here}``; ``None``: every one listed.
    models: list[str] | dict[str, str] | None = None
    #: What its models can do (``reasoning`` if they think aloud); ``None``: the defaults.
    capabilities: list[ModelCapability] | None = None
    #: The context window in tokens, when the server does not report one.
    context_length: int | None = Field(default=None, gt=0)
    #: How the server takes a JSON Schema: OpenAI's ``json_schema`` form, or
    #: ``{"type": "json_object", "schema": ...}`` (llama-cpp-python's server); ``auto`` tries
    #: the first and falls back to the second when the server refuses it.
    structured_output: StructuredOutput = "auto"
    #: Whether the server takes Chat Completions' ``prediction`` (predicted outputs): sent on
    #: only then, dropped otherwise (the answer is the same without it).
    predicted_outputs: bool = False
    #: Retries of a request the server has not started answering (refused, 502–504).
    retries: int = Field(default=2, ge=0, le=len(RETRY_DELAYS))
    #: Requests sent to the server at once, per model; more wait in this service's line.
    parallel: int = Field(default=8, gt=0)

    @classmethod
    def parse(cls, config: dict[str, Any]) -> RemoteServer:
        """A configured server; a bad entry raises ``ValueError`` naming the problem."""
        try:
            return cls.model_validate(config)
        except ValidationError as exc:
            name = config.get("name", "?")
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors()
            )
            raise ValueError(f"remote server {name!r}: {problems}") from None

    def api_token(self) -> str | None:
        """The API key sent as ``Authorization: Bearer``: configured, or from the environment."""
        if self.api_key:
            return self.api_key
        return os.environ.get(self.api_key_env) if self.api_key_env else None
