"""A Streamable HTTP MCP server made with the ``mcp`` SDK's FastMCP, for the MCP tests.

``python tests/mcp_http_server.py PORT RECORD`` serves on 127.0.0.1:PORT at ``/mcp``; its tool
``record`` appends each note to the file RECORD (so a test counts the calls that ran), and
``hang`` never answers (a call past the service's timeout).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from mcp.server.fastmcp import FastMCP


def main(port: int, record: Path) -> None:
    server = FastMCP("lmsp-tests", host="127.0.0.1", port=port, log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> int:
        """The sum of two integers."""
        return a + b

    @server.tool()
    def note(text: str) -> str:
        """Write a note down."""
        with record.open("a", encoding="utf-8") as file:
            file.write(text + "\n")
        return f"noted: {text}"

    @server.tool()
    async def hang() -> str:
        """Never answers."""
        await asyncio.sleep(3600)
        return "late"

    server.run(transport="streamable-http")


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
