"""MCP: the servers whose tools the service runs for the model (LMSP 1.0 section 11.6).

:mod:`.config` reads ``mcp.json``; :mod:`.connection` is the client of one server;
:mod:`.servers` the owner of them all (``McpServers``, its settings as traits); :mod:`.offer`
one response's MCP tools, calls and items.
"""

from .servers import McpServers

__all__ = ["McpServers"]
