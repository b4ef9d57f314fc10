"""One MCP server as this service's client holds it: started on first use, its session kept
while it is used, stopped when idle, started again after it failed.

The ``mcp`` SDK's transports and session are async context managers that must end in the task
that entered them: each connection's own task holds them (:meth:`Connection._hold`), and
requests from any task go through the session it shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from datetime import timedelta
from typing import Any, Literal

import httpx
from mcp import ClientSession, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, EmbeddedResource, ImageContent, TextContent

from ...protocol.items import McpToolInfo
from .config import ServerConfig

State = Literal["stopped", "running", "failed"]


class McpFailure(Exception):
    """A server that could not be started, listed or called: the message says what happened."""


class Connection:
    """The client side of one MCP server (:class:`ServerConfig`)."""

    def __init__(
        self,
        config: ServerConfig,
        log: logging.Logger | logging.LoggerAdapter[Any],
        *,
        start_timeout: float,
        idle_seconds: float,
    ) -> None:
        self.config = config
        self.log = log
        self.start_timeout = start_timeout
        self.idle_seconds = idle_seconds
        self.state: State = "stopped"
        self.error: str | None = config.error
        #: The tools as last listed (``None``: never listed).
        self.tools: list[McpToolInfo] | None = None
        self._session: ClientSession | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._starting = asyncio.Lock()
        self._in_use = 0
        self._idle: asyncio.TimerHandle | None = None

    @property
    def label(self) -> str:
        """The server's label in ``mcp.json``."""
        return self.config.label

    # --- using it ---------------------------------------------------------------------------

    async def list_tools(self) -> list[McpToolInfo]:
        """The server's tools, listed now (and kept as :attr:`tools`)."""
        async with self._used() as session:
            listed = await self._bounded(session.list_tools(), self.start_timeout, "listing")
        self.tools = [
            McpToolInfo(
                name=tool.name,
                description=tool.description,
                input_schema=dict(tool.inputSchema),
                annotations=tool.annotations.model_dump(exclude_none=True)
                if tool.annotations
                else None,
            )
            for tool in listed.tools
        ]
        return self.tools

    async def call(self, name: str, arguments: dict[str, Any], limit: float) -> str:
        """Run the tool ``name``; its output as text. A tool's own error (``isError``), a
        server that fails or hangs past ``limit`` seconds → :class:`McpFailure`."""
        async with self._used() as session:
            result = await self._bounded(
                session.call_tool(name, arguments, read_timeout_seconds=timedelta(seconds=limit)),
                limit,
                f"the call of {name!r}",
            )
        text = result_text(result)
        if result.isError:
            raise McpFailure(text or f"the tool {name!r} failed")
        return text

    @contextlib.asynccontextmanager
    async def _used(self) -> AsyncIterator[ClientSession]:
        """The session, the server started if it must be; idle time counts from the end."""
        if self.config.error is not None:
            raise McpFailure(self.config.error)
        if self.config.disabled:
            raise McpFailure(f"the MCP server {self.label!r} is disabled")
        self._in_use += 1
        if self._idle is not None:
            self._idle.cancel()
        try:
            yield await self._start()
        finally:
            self._in_use -= 1
            if not self._in_use and self.state == "running":
                loop = asyncio.get_running_loop()
                self._idle = loop.call_later(self.idle_seconds, self._stop_if_idle)

    async def _bounded(self, request: Any, limit: float, what: str) -> Any:
        """Await ``request``; past ``limit`` seconds, or the server gone first → McpFailure."""
        holder = self._holder
        task = asyncio.ensure_future(request)
        waiting = {task} if holder is None else {task, holder}
        done, _ = await asyncio.wait(waiting, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        if task not in done:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            if holder is not None and holder.done():
                raise McpFailure(self.error or f"the MCP server {self.label!r} exited")
            raise McpFailure(f"{what} took more than {limit:g} s")
        try:
            return task.result()
        except McpFailure:
            raise
        except Exception as exc:
            if holder is not None and holder.done():
                raise McpFailure(self.error or f"the MCP server {self.label!r} exited") from None
            if _connection_closed(exc):
                self._failed(f"the MCP server {self.label!r} closed the connection (it exited?)")
                raise McpFailure(self.error or "") from None
            raise McpFailure(_describe(exc)) from None

    # --- starting and stopping --------------------------------------------------------------

    async def _start(self) -> ClientSession:
        async with self._starting:
            old = self._holder
            if self._session is not None and old is not None and not self._stop.is_set():
                return self._session
            if old is not None and not old.done():  # it is stopping: let it end first
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(old), self.start_timeout)
            self._stop = asyncio.Event()
            ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
            self._holder = asyncio.create_task(self._hold(ready), name=f"mcp {self.label}")
            began = time.monotonic()
            try:
                self._session = await asyncio.wait_for(asyncio.shield(ready), self.start_timeout)
            except TimeoutError:
                self._stop.set()
                self._failed(f"it did not start within {self.start_timeout:g} s")
                raise McpFailure(f"the MCP server {self.label!r} {self.error}") from None
            except McpFailure:
                raise
            except Exception as exc:
                raise McpFailure(f"the MCP server {self.label!r} failed to start: {exc}") from None
            self.state, self.error = "running", None
            self.log.info("MCP server %r started in %.2f s", self.label, time.monotonic() - began)
            return self._session

    async def _hold(self, ready: asyncio.Future[ClientSession]) -> None:
        """Enter the transport and the session, share the session, hold them until stopped."""
        errlog = _LogPipe(self.log, self.label) if self.config.transport == "stdio" else None
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(errlog))
                if errlog is not None:
                    errlog.started()
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                ready.set_result(session)
                await self._stop.wait()
        except BaseException as exc:  # the SDK's task groups raise exception groups
            message = _describe(exc)
            if not ready.done():
                ready.set_exception(McpFailure(message))
            if not self._stop.is_set():
                self._failed(message)
            if not isinstance(exc, Exception):
                raise
        finally:
            if errlog is not None:
                errlog.close()
            self._session = None
            if self.state == "running":
                self.state = "stopped"

    def _transport(self, errlog: _LogPipe | None) -> AbstractAsyncContextManager[tuple[Any, Any]]:
        config = self.config
        if config.transport == "stdio":
            assert errlog is not None
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            return _two(stdio_client(params, errlog=errlog.writer))
        if config.transport == "sse":
            return _two(sse_client(config.url, headers=dict(config.headers)))
        client = httpx.AsyncClient(
            headers=dict(config.headers), timeout=httpx.Timeout(30, read=300)
        )
        return _two(_closing(client, streamable_http_client(config.url, http_client=client)))

    def _failed(self, message: str) -> None:
        self.state, self.error = "failed", message
        self.log.warning("MCP server %r failed: %s", self.label, message)
        self._stop.set()

    def _stop_if_idle(self) -> None:
        if not self._in_use and self.state == "running":
            self.log.info("MCP server %r stopped after %g s idle", self.label, self.idle_seconds)
            self._stop.set()

    async def stop(self) -> None:
        """Stop the server (it starts again on its next use)."""
        if self._idle is not None:
            self._idle.cancel()
        self._stop.set()
        holder = self._holder
        if holder is not None and not holder.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(holder), 10)
            if not holder.done():
                holder.cancel()
        if self.state == "running":
            self.state = "stopped"


@contextlib.asynccontextmanager
async def _two(
    transport: AbstractAsyncContextManager[Any],
) -> AsyncIterator[tuple[Any, Any]]:
    """A transport's read and write streams (Streamable HTTP also gives a session id)."""
    async with transport as streams:
        yield streams[0], streams[1]


@contextlib.asynccontextmanager
async def _closing(
    client: httpx.AsyncClient, transport: AbstractAsyncContextManager[Any]
) -> AsyncIterator[Any]:
    async with client, transport as streams:
        yield streams


def result_text(result: CallToolResult) -> str:
    """A call's result as the text the model reads: its text content, else its structured
    content as JSON; other content is named by its kind."""
    texts: list[str] = []
    for part in result.content:
        if isinstance(part, TextContent):
            texts.append(part.text)
        elif isinstance(part, ImageContent):
            texts.append(f"[an image, {part.mimeType}]")
        elif isinstance(part, EmbeddedResource):
            resource = part.resource
            texts.append(getattr(resource, "text", None) or f"[a resource, {resource.uri}]")
        else:
            texts.append(f"[{part.type}]")
    if not texts and result.structuredContent is not None:
        return json.dumps(result.structuredContent)
    return "\n".join(texts)


def _connection_closed(exc: BaseException) -> bool:
    return "Connection closed" in str(exc)


def _describe(exc: BaseException) -> str:
    """An exception (an exception group's first leaf) as one line for the user."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, McpFailure) else f"{type(exc).__name__}: {text}"


class _LogPipe:
    """A stdio server's stderr, each line into the server log under the server's label."""

    def __init__(self, log: logging.Logger | logging.LoggerAdapter[Any], label: str) -> None:
        reader, writer = os.pipe()
        self.writer = os.fdopen(writer, "w")
        self._reader = os.fdopen(reader, "r", errors="replace")
        self._thread = threading.Thread(
            target=self._relay, args=(log, label), name=f"mcp {label} stderr", daemon=True
        )
        self._thread.start()

    def _relay(self, log: logging.Logger | logging.LoggerAdapter[Any], label: str) -> None:
        with self._reader:
            for line in self._reader:
                log.info("MCP server %r: %s", label, line.rstrip())

    def started(self) -> None:
        """The server has its own copy of the pipe: the relay ends when the server does."""
        self.writer.close()

    def close(self) -> None:
        """Close this side of the pipe (if the server never started)."""
        self.writer.close()
