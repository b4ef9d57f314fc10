"""OpenAI's Python SDK, unmodified, with MCP tools (11.6): ``responses.create`` with an ``mcp``
tool, and the ``mcp_approval_response`` round, on the live server and the bundled model.

The model's forced call of ``server-everything``'s ``get-sum`` has arguments the decoder holds
to the tool's schema (two numbers, short); the test checks that the output is the server's real
answer to them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from openai.types.responses.response_output_item import McpApprovalRequest, McpCall, McpListTools

from tests.conftest import MODEL, LiveServer, live_config, running_server
from tests.helpers import MCP_EVERYTHING, mcp_stdio_server

#: Its one tool get-sum offered, of its thirteen: a short prompt.
EVERYTHING: Any = {"type": "mcp", "server_label": "everything", "allowed_tools": ["get-sum"]}
SUM: Any = {"type": "mcp", "server_label": "everything", "name": "get-sum"}
ANSWER = re.compile(r"The sum of (\S+) and (\S+) is (\S+)\.")


@pytest.fixture(scope="module")
def mcp_server(
    tmp_path_factory: pytest.TempPathFactory, bundled_model_path: Any
) -> Iterator[LiveServer]:
    """A live server whose mcp.json, in its Jupyter config directory, runs server-everything."""
    tmp = tmp_path_factory.mktemp("live-mcp")
    (tmp / "config").mkdir()
    servers = {"everything": mcp_stdio_server(MCP_EVERYTHING, "stdio")}
    (tmp / "config" / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    with running_server(tmp, config=live_config()) as server:
        yield server


@pytest.fixture
def sdk(mcp_server: LiveServer) -> Iterator[OpenAI]:
    with OpenAI(base_url=mcp_server.lmsp, api_key=mcp_server.token, max_retries=0) as client:
        yield client


def ask(**fields: Any) -> Any:
    return {"model": MODEL, "temperature": 0, "max_output_tokens": 24, **fields}


def summed(call: McpCall) -> bool:
    """Whether the output is server-everything's answer to the call's arguments."""
    arguments = json.loads(call.arguments)
    found = ANSWER.fullmatch(call.output or "")
    assert found is not None, call.output
    a, b, total = (float(number) for number in found.groups())
    return (a, b) == (arguments["a"], arguments["b"]) and math.isclose(total, a + b)


def test_responses_create_runs_an_mcp_tool(sdk: OpenAI) -> None:
    response = sdk.responses.create(
        **ask(
            input="Add 2 and 3.",
            tools=[{**EVERYTHING, "require_approval": "never"}],
            tool_choice=SUM,
        )
    )
    listing, call, *_ = response.output
    assert isinstance(listing, McpListTools)
    assert "get-sum" in {tool.name for tool in listing.tools}
    assert isinstance(call, McpCall)
    assert (call.server_label, call.name, call.error) == ("everything", "get-sum", None)
    assert summed(call)


def test_the_approval_round_runs_the_call_the_user_approved(sdk: OpenAI) -> None:
    tools: Any = [EVERYTHING]  # require_approval: "always" by default
    asked = sdk.responses.create(
        **ask(input="Add 2 and 3.", tools=tools, tool_choice=SUM, store=True)
    )
    assert asked.status == "completed"
    (request,) = [item for item in asked.output if isinstance(item, McpApprovalRequest)]
    assert (request.server_label, request.name) == ("everything", "get-sum")
    assert not [item for item in asked.output if isinstance(item, McpCall)]

    approval: Any = {
        "type": "mcp_approval_response",
        "approval_request_id": request.id,
        "approve": True,
    }
    approved = sdk.responses.create(
        **ask(previous_response_id=asked.id, input=[approval], tools=tools, store=True)
    )
    call, *_ = approved.output
    assert isinstance(call, McpCall)
    assert call.approval_request_id == request.id
    assert call.arguments == request.arguments
    assert summed(call)
    assert approved.previous_response_id == asked.id
