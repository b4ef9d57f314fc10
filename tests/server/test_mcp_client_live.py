"""``AsyncLmspClient`` with ``mcp=[...]`` and ``answer_approvals`` against the service, the
scripted engine and the Python SDK's Streamable HTTP server of ``tests/mcp_http_server.py``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from lmsp_jupyter.client import AsyncLmspClient
from lmsp_jupyter.protocol.items import McpApprovalRequest, McpCall
from tests.conftest import MODEL

# the MCP servers and their mcp.json, as the service's own MCP tests configure them
from tests.server.test_mcp import (  # noqa: F401 (fixtures)
    AFTER,
    files,
    forced,
    http_url,
    jp_server_config,
    mcp_json,
    record,
)


@pytest.mark.script(forced("add", {"a": 2, "b": 40}), AFTER)
async def test_the_client_offers_a_label_and_its_approval_runs_the_call(
    lmsp: httpx.AsyncClient, jp_auth_header: dict[str, str]
) -> None:
    token = jp_auth_header["Authorization"].split()[-1]
    request: dict[str, Any] = {
        "model": MODEL,
        "input": "Add 2 and 40.",
        "store": True,
        "tool_choice": {"type": "mcp", "server_label": "py", "name": "add"},
    }
    async with AsyncLmspClient(str(lmsp.base_url), token) as client:
        asked = await client.create_response(request, mcp=["py"])
        (waiting,) = [item for item in asked.output if isinstance(item, McpApprovalRequest)]
        assert not [item for item in asked.output if isinstance(item, McpCall)]
        done = await client.answer_approvals(asked)
    (call,) = [item for item in done.output if isinstance(item, McpCall)]
    assert (call.approval_request_id, call.output) == (waiting.id, "42")
    assert done.previous_response_id == asked.id
