"""McpServers: the MCP servers this service runs tools on, as ``mcp.json`` configures them."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_config_dir
from traitlets import Bool, Float, Unicode, default
from traitlets.config import LoggingConfigurable

from ...protocol.errors import LmspError
from ...protocol.mcp import McpServer, McpServerList, McpServerTool
from .config import ConfigError, ServerConfig, read_config
from .connection import Connection


class McpServers(LoggingConfigurable):
    """Owns the MCP servers: reads ``mcp.json``, starts each server on its first use, stops
    it when idle and at shutdown, and starts it again after it failed (docs/mcp.md)."""

    config_file = Unicode(
        help="The mcp.json that configures the MCP servers a request's mcp tool names by "
        "server_label (default: mcp.json in Jupyter's config directory, `jupyter --config-dir`). "
        "Read again when it changes. See docs/mcp.md.",
    ).tag(config=True)

    allow_request_urls = Bool(
        False,
        help="Whether a request's mcp tool may name its own server_url (a server this service "
        "connects to on the request's behalf). Off by default; always off for a JupyterHub "
        "service.",
    ).tag(config=True)

    call_timeout_seconds = Float(
        60.0,
        help="How long a call of an MCP tool may take; past it, the call ends with an error and "
        "the answer goes on.",
    ).tag(config=True)

    start_timeout_seconds = Float(
        60.0,
        help="How long an MCP server may take to start and to list its tools.",
    ).tag(config=True)

    idle_seconds = Float(
        600.0,
        help="An MCP server unused this long is stopped (a stdio server's process ends); its "
        "next use starts it again.",
    ).tag(config=True)

    @default("config_file")
    def _default_config_file(self) -> str:
        return str(Path(jupyter_config_dir()) / "mcp.json")

    def __init__(self, *, hub: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: A JupyterHub service never connects to a request's own URL.
        self.hub = hub
        self._connections: dict[str, Connection] = {}
        self._adhoc: dict[tuple[str, tuple[tuple[str, str], ...]], Connection] = {}
        self._read: tuple[float, int] | bool | None = False  # False: never read
        self._problem: str | None = None
        self._answered: set[str] = set()

    @property
    def request_urls_allowed(self) -> bool:
        """Whether a request may name its own ``server_url``."""
        return self.allow_request_urls and not self.hub

    def connections(self) -> list[Connection]:
        """The configured servers, in the file's order (``mcp.json`` read again if changed)."""
        self._reload()
        return list(self._connections.values())

    def connection(self, label: str, param: str) -> Connection:
        """The configured server ``label``; unknown → ``invalid_request`` naming ``param``."""
        self._reload()
        found = self._connections.get(label)
        if found is None:
            where = f" ({self._problem})" if self._problem else ""
            raise LmspError(
                "invalid_request",
                f"no MCP server {label!r} is configured in {self.config_file}{where}",
                param=param,
            )
        return found

    def remote(self, label: str, url: str, headers: dict[str, str], param: str) -> Connection:
        """A server at a request's own ``url``, if the operator allows request URLs."""
        if not self.request_urls_allowed:
            raise LmspError(
                "invalid_request",
                "server_url is not allowed here: name a server of mcp.json by its server_label",
                param=param,
            )
        if not url.startswith(("http://", "https://")):
            raise LmspError("invalid_request", "server_url must be an http(s) URL", param=param)
        key = (url, tuple(sorted(headers.items())))
        if key not in self._adhoc:
            config = ServerConfig(label, "http", url=url, headers=dict(headers))
            self._adhoc[key] = self._connect(config)
        return self._adhoc[key]

    def _connect(self, config: ServerConfig) -> Connection:
        return Connection(
            config,
            self.log,
            start_timeout=self.start_timeout_seconds,
            idle_seconds=self.idle_seconds,
        )

    def _reload(self) -> None:
        """Read ``mcp.json`` if it changed; a server whose entry changed is stopped."""
        path = Path(self.config_file).expanduser()
        try:
            stat = path.stat()
            seen: tuple[float, int] | None = (stat.st_mtime, stat.st_size)
        except OSError:
            seen = None
        if seen == self._read:
            return
        self._read = seen
        try:
            configs = read_config(path)
            self._problem = None
        except ConfigError as exc:
            self.log.warning("MCP servers: %s", exc)
            configs, self._problem = {}, str(exc)
        kept: dict[str, Connection] = {}
        for label, config in configs.items():
            old = self._connections.pop(label, None)
            if old is not None and old.config == config:
                kept[label] = old
            else:
                if old is not None:
                    self._stop_later(old)
                kept[label] = self._connect(config)
        for gone in self._connections.values():
            self._stop_later(gone)
        self._connections = kept
        if configs:
            self.log.info("MCP servers of %s: %s", path, ", ".join(configs))

    def _stop_later(self, connection: Connection) -> None:
        with contextlib.suppress(RuntimeError):  # no loop: nothing of it runs
            asyncio.get_running_loop().create_task(connection.stop())

    def answer(self, approval_request_id: str) -> bool:
        """Claim the approved call ``approval_request_id`` for running; ``False`` when it was
        claimed before (an approval runs its call once)."""
        if approval_request_id in self._answered:
            return False
        self._answered.add(approval_request_id)
        return True

    def listing(self) -> McpServerList:
        """The configured servers as ``GET /lmsp/v1/mcp/servers`` lists them."""
        return McpServerList(
            data=[
                McpServer(
                    label=connection.label,
                    transport=connection.config.transport,
                    state=connection.state,
                    error=connection.error,
                    disabled=connection.config.disabled,
                    tools=None
                    if connection.tools is None
                    else [
                        McpServerTool(
                            name=tool.name,
                            description=tool.description,
                            input_schema=tool.input_schema,
                        )
                        for tool in connection.tools
                    ],
                )
                for connection in self.connections()
            ]
        )

    async def close(self) -> None:
        """Stop every server (the Jupyter server is stopping)."""
        every = [*self._connections.values(), *self._adhoc.values()]
        await asyncio.gather(*(connection.stop() for connection in every))
