"""The ``mcp`` tool, its ``tool_choice`` and the MCP items of a request (11.6)."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.items import McpApprovalResponse, McpCall
from lmsp_jupyter.protocol.requests import McpTool, parse_response_request


def request(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "hi", **fields}


def mcp_tool(**fields: Any) -> McpTool:
    (tool,) = parse_response_request(request(tools=[{"type": "mcp", **fields}])).mcp_tools()
    return tool


def test_allowed_tools_and_require_approval_in_both_of_openais_shapes() -> None:
    listed = mcp_tool(server_label="files", allowed_tools=["read"])
    named = mcp_tool(server_label="files", allowed_tools={"tool_names": ["read"]})
    assert listed.allows("read") and named.allows("read")
    assert not listed.allows("write") and not named.allows("write")
    assert mcp_tool(server_label="files").needs_approval("read")  # "always" by default
    assert not mcp_tool(server_label="files", require_approval="never").needs_approval("read")
    rule = {"never": {"tool_names": ["read"]}, "always": {"tool_names": ["write"]}}
    filtered = mcp_tool(server_label="files", require_approval=rule)
    assert not filtered.needs_approval("read")
    assert filtered.needs_approval("write") and filtered.needs_approval("other")


def test_mcp_items_come_back_in_the_input() -> None:
    approval = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False}
    call = {
        "type": "mcp_call",
        "id": "mcp_1",
        "server_label": "files",
        "name": "read",
        "arguments": "{}",
        "output": "text",
        "error": None,
        "approval_request_id": None,
        "status": "completed",
    }
    items = parse_response_request(request(input=[call, approval])).input
    assert isinstance(items[0], McpCall) and items[0].output == "text"
    assert isinstance(items[1], McpApprovalResponse) and items[1].approve is False


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {
                "tools": [{"type": "mcp", "server_label": "a"}],
                "tool_choice": {"type": "mcp", "server_label": "b"},
            },
            "tool_choice.server_label",
        ),
        (
            {"tools": [{"type": "mcp", "server_label": "a", "connector_id": "x"}]},
            "tools[0].connector_id",
        ),
        ({"tools": [{"type": "mcp", "server_label": "a b"}]}, "tools[0].server_label"),
        (
            {
                "input": [
                    {"type": "mcp_approval_response", "approval_request_id": "r", "approve": 1}
                ]
            },
            "input[0].approve",
        ),
    ],
)
def test_a_wrong_mcp_field_is_invalid_request_naming_it(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(LmspError) as raised:
        parse_response_request(request(**fields))
    assert (raised.value.code, raised.value.param) == ("invalid_request", param)
