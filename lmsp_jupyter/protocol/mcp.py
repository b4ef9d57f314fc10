"""``GET /lmsp/v1/mcp/servers``: the MCP servers the service runs tools on (11.6)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel


class McpServerTool(BaseModel):
    """A tool of an MCP server, as last listed."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any]


class McpServer(BaseModel):
    """One server of ``mcp.json``: how it is reached, its state and its tools."""

    label: str
    transport: Literal["stdio", "http", "sse"]
    state: Literal["stopped", "running", "failed"]
    #: Why it failed (or why its entry cannot be used).
    error: str | None
    disabled: bool
    #: Its tools as last listed; ``None`` until they are listed.
    tools: list[McpServerTool] | None


class McpServerList(BaseModel):
    """The configured MCP servers, in the order of ``mcp.json``."""

    object: Literal["list"] = "list"
    data: list[McpServer]
