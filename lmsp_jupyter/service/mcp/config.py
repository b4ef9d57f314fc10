"""``mcp.json``: the MCP servers the operator configured, in the ``mcpServers`` format that
Claude Desktop, Cursor and LM Studio read (docs/mcp.md)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Transport = Literal["stdio", "http", "sse"]

_ENV = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


class ConfigError(ValueError):
    """A server's entry in ``mcp.json`` that cannot be used (the message says why)."""


@dataclass(frozen=True)
class ServerConfig:
    """One entry of ``mcpServers``: a command run over stdio, or a remote server's URL."""

    label: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    disabled: bool = False
    #: Tools whose calls need no approval, whatever a request asks.
    auto_approve: frozenset[str] = frozenset()
    #: Why the entry cannot be used (``${env:NAME}`` unset, a wrong type), if it cannot.
    error: str | None = None


def read_config(path: Path, environ: Mapping[str, str] | None = None) -> dict[str, ServerConfig]:
    """The servers of the ``mcp.json`` at ``path`` (none when it does not exist).

    A file that is not JSON, or whose ``mcpServers`` is not an object, raises
    :class:`ConfigError`; an entry that cannot be used is kept with its ``error``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from None
    servers = document.get("mcpServers", {}) if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: mcpServers must be an object of servers by label")
    environ = os.environ if environ is None else environ
    return {
        str(label): server_config(str(label), entry, environ) for label, entry in servers.items()
    }


def server_config(label: str, entry: Any, environ: Mapping[str, str]) -> ServerConfig:
    """The server ``label`` of ``mcpServers``, its ``${env:NAME}`` references expanded."""
    try:
        return _parse(label, entry, environ)
    except ConfigError as exc:
        disabled = isinstance(entry, dict) and entry.get("disabled") is True
        transport: Transport = "stdio"
        if isinstance(entry, dict) and "url" in entry:
            transport = "sse" if entry.get("type") == "sse" else "http"
        return ServerConfig(label, transport, disabled=disabled, error=str(exc))


def _parse(label: str, entry: Any, environ: Mapping[str, str]) -> ServerConfig:
    if not isinstance(entry, dict):
        raise ConfigError("an entry must be an object")
    disabled = _typed(entry, "disabled", bool, False)
    auto_approve = frozenset(_strings(entry, "autoApprove"))
    kind = _typed(entry, "type", str, "")
    if "url" in entry:
        if kind not in ("", "http", "streamable-http", "streamableHttp", "sse"):
            raise ConfigError(f"type {kind!r} is neither 'http' nor 'sse'")
        return ServerConfig(
            label,
            "sse" if kind == "sse" else "http",
            url=_expand(_typed(entry, "url", str, ""), environ),
            headers=_expanded_map(entry, "headers", environ),
            disabled=disabled,
            auto_approve=auto_approve,
        )
    if "command" not in entry:
        raise ConfigError("an entry needs a command (stdio) or a url (http, sse)")
    if kind not in ("", "stdio"):
        raise ConfigError(f"type {kind!r} needs a url")
    cwd = _typed(entry, "cwd", str, "")
    return ServerConfig(
        label,
        "stdio",
        command=_expand(_typed(entry, "command", str, ""), environ),
        args=tuple(_expand(arg, environ) for arg in _strings(entry, "args")),
        env=_expanded_map(entry, "env", environ),
        cwd=_expand(cwd, environ) or None,
        disabled=disabled,
        auto_approve=auto_approve,
    )


def _typed(entry: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = entry.get(key, default)
    if not isinstance(value, kind):
        raise ConfigError(f"{key} must be a {kind.__name__}")
    return value


def _strings(entry: dict[str, Any], key: str) -> list[str]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{key} must be a list of strings")
    return value


def _expanded_map(entry: dict[str, Any], key: str, environ: Mapping[str, str]) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(item, str) for item in value.values()):
        raise ConfigError(f"{key} must be an object of strings")
    return {name: _expand(item, environ) for name, item in value.items()}


def _expand(text: str, environ: Mapping[str, str]) -> str:
    """``text`` with each ``${env:NAME}`` replaced by the variable; one unset → ConfigError."""

    def variable(match: re.Match[str]) -> str:
        name = match[1]
        if name not in environ:
            raise ConfigError(f"${{env:{name}}} is not set")
        return environ[name]

    return _ENV.sub(variable, text)
