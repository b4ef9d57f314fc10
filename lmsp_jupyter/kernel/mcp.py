"""MCP tools in an ask: the servers ``--mcp`` names, and the tools approved for the session.

The service runs the MCP servers its operator configured (``mcp.json``) and the calls on them
(LMSP 1.0 section 11.6); an ask names servers by label and offers each as one ``mcp`` tool. A
call that needs approval ends its round with an ``mcp_approval_request``, which the ask shows
as a card like a ``@tool`` call's; the decision goes back as an ``mcp_approval_response`` in
the next round. "Always for this tool" approves a server's tool for the rest of the kernel
session: later asks tell the service it needs no approval, and a request for it that still
comes (in the ask that approved it) is answered at once.
"""

from __future__ import annotations

import threading
from typing import Any

from IPython.core.error import UsageError


class McpApprovals:
    """The MCP tools the user approved "always for this tool" in this kernel session."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tools: set[tuple[str, str]] = set()

    def add(self, server_label: str, name: str) -> None:
        """Approve every later call of the tool ``name`` of the server ``server_label``."""
        with self._lock:
            self._tools.add((server_label, name))

    def allows(self, server_label: str, name: str) -> bool:
        """Whether calls of that tool are approved without asking."""
        with self._lock:
            return (server_label, name) in self._tools

    def tool_names(self, server_label: str) -> list[str]:
        """The tools of ``server_label`` approved for the session, sorted."""
        with self._lock:
            return sorted(name for label, name in self._tools if label == server_label)


def mcp_tools(labels: tuple[str, ...], approvals: McpApprovals) -> list[dict[str, Any]]:
    """One ``mcp`` tool per label; the tools approved for the session need no approval."""
    tools: list[dict[str, Any]] = []
    for label in dict.fromkeys(labels):
        tool: dict[str, Any] = {"type": "mcp", "server_label": label}
        approved = approvals.tool_names(label)
        if approved:
            tool["require_approval"] = {"never": {"tool_names": approved}}
        tools.append(tool)
    return tools


def mcp_tool_choice(choice: str, labels: tuple[str, ...]) -> dict[str, str]:
    """``LABEL:TOOL``, a tool of an ``--mcp`` server, as a forced ``tool_choice``."""
    label, _, name = choice.partition(":")
    if label not in labels or not name:
        raise UsageError(
            f"--tool-choice {choice!r}: LABEL:TOOL names a tool of a server given to --mcp"
        )
    return {"type": "mcp", "server_label": label, "name": name}
