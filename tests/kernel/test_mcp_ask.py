"""``--mcp``: MCP servers' tools in an ask, their approval cards and "always for this tool".

The service side is scripted (``ScriptedClient`` plays the items LMSP 1.0 section 11.6 names);
what is checked is what the kernel asks for and what it answers.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from IPython.core.error import UsageError

from lmsp_jupyter.kernel.answer import Answer
from lmsp_jupyter.kernel.display import text_bundle
from lmsp_jupyter.kernel.mcp import McpApprovals
from lmsp_jupyter.kernel.options import parse_ask
from lmsp_jupyter.kernel.request import ask_request
from lmsp_jupyter.kernel.rounds import MCP_DECLINED
from lmsp_jupyter.kernel.tools import tool
from lmsp_jupyter.protocol.items import (
    McpToolInfo,
    OutputMcpApprovalRequest,
    OutputMcpCall,
    OutputMcpListTools,
)
from tests.kernel.fakes import RecordingView, ScriptedClient, Turn
from tests.kernel.test_magics import make_shell  # noqa: F401 (a fixture)

READ = '{"path": "notes.txt"}'
LISTED = OutputMcpListTools(
    id="mcpl_1",
    server_label="files",
    tools=[McpToolInfo(name="read_file", description="Read a file.", input_schema={})],
)


@tool
def weather(city: str) -> str:
    """The weather."""
    return city


def approval(number: int, name: str = "read_file") -> OutputMcpApprovalRequest:
    return OutputMcpApprovalRequest(
        id=f"mcpr_{number}", server_label="files", name=name, arguments=READ
    )


def ran(number: int, approval_id: str) -> OutputMcpCall:
    return OutputMcpCall(
        id=f"mcp_{number}",
        server_label="files",
        name="read_file",
        arguments=READ,
        output="hello from notes",
        approval_request_id=approval_id,
    )


def request_of(line: str, approvals: McpApprovals | None = None) -> dict[str, Any]:
    namespace = {"weather": weather}
    request, _ = ask_request(
        parse_ask(line), namespace, default_model=lambda: "m", approvals=approvals
    )
    return request


def start(client: ScriptedClient, approvals: McpApprovals | None = None) -> tuple[Answer, Any]:
    views: list[RecordingView] = []

    def view(answer: Answer) -> RecordingView:
        views.append(RecordingView(answer))
        return views[-1]

    request = request_of("--mcp files Read notes.txt")
    answer = Answer(client, request, view=view, approvals=approvals)
    return answer.start().wait(5), views[0]


def test_each_label_is_one_mcp_tool_beside_the_function_tools() -> None:
    request = request_of("--tools weather --mcp files,calc --tool-choice files:read_file Go")
    assert request["tools"] == [
        weather.definition(),
        {"type": "mcp", "server_label": "files"},
        {"type": "mcp", "server_label": "calc"},
    ]
    assert request["tool_choice"] == {
        "type": "mcp",
        "server_label": "files",
        "name": "read_file",
    }
    assert request_of("--mcp files --tool-choice required Go")["tool_choice"] == "required"
    assert parse_ask("--mcp files,calc Go").mcp == ("files", "calc")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--mcp files, Go", "--mcp takes names separated by commas, not 'files,'"),
        (
            "--mcp files --tool-choice calc:add Go",
            "--tool-choice 'calc:add': LABEL:TOOL names a tool of a server given to --mcp",
        ),
        (
            "--mcp files --tool-choice files: Go",
            "--tool-choice 'files:': LABEL:TOOL names a tool of a server given to --mcp",
        ),
    ],
)
def test_bad_mcp_options_are_one_line(line: str, message: str) -> None:
    with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
        request_of(line)


def test_an_approval_request_waits_then_approve_sends_the_response_and_goes_on() -> None:
    client = ScriptedClient(
        [
            Turn(items=(LISTED, approval(1))),
            Turn(deltas=("It says hello.",), items=(ran(2, "mcpr_1"),)),
        ]
    )
    answer, view = start(client)
    assert answer.status == "requires_action"
    assert len(client.requests) == 1
    card = view.states[-1]["tool_calls"]["mcpr_1"]
    assert card == {
        "name": "read_file",
        "arguments": READ,
        "decision": "pending",
        "output": None,
        "server_label": "files",
    }

    answer.handle_message({"type": "decide", "call_id": "mcpr_1", "decision": "approve"})
    answer.wait(5)
    follow_up = client.requests[1]
    assert follow_up["previous_response_id"] == "resp_1"
    assert follow_up["input"] == [
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
    ]
    assert follow_up["tools"] == [{"type": "mcp", "server_label": "files"}]
    assert (answer.status, answer.text) == ("completed", "It says hello.")
    decided = answer.state.tool_calls["mcpr_1"]
    assert (decided.decision, decided.output) == ("approved", None)  # the service ran it
    plain = text_bundle(answer)["text/plain"]
    assert f"files:read_file({READ}) → hello from notes" in plain


def test_deny_tells_the_service_which_tells_the_model() -> None:
    client = ScriptedClient([Turn(items=(approval(1),)), Turn(deltas=("Ok.",))])
    answer, _ = start(client)
    answer.deny()
    answer.wait(5)
    assert client.requests[1]["input"] == [
        {
            "type": "mcp_approval_response",
            "approval_request_id": "mcpr_1",
            "approve": False,
            "reason": MCP_DECLINED,
        }
    ]
    assert answer.state.tool_calls["mcpr_1"].decision == "denied"


def test_always_for_this_tool_approves_it_for_the_session_and_no_other() -> None:
    approvals = McpApprovals()
    both = (approval(1), approval(2), approval(3, name="write_file"))
    client = ScriptedClient([Turn(items=both), Turn(deltas=("Done.",))])
    answer, _ = start(client, approvals)
    answer.handle_message(
        {"type": "decide", "call_id": "mcpr_1", "decision": "approve", "always": True}
    )
    # the ask's other read_file call is approved with it; write_file still waits
    calls = answer.state.tool_calls
    assert [calls[f"mcpr_{n}"].decision for n in (1, 2, 3)] == ["approved", "auto", "pending"]
    assert answer.status == "requires_action"
    assert len(client.requests) == 1
    answer.deny("mcpr_3")
    answer.wait(5)
    assert [item["approve"] for item in client.requests[1]["input"]] == [True, True, False]
    assert approvals.allows("files", "read_file")
    assert not approvals.allows("files", "write_file")

    # a later ask tells the service; a request that comes anyway is answered at once
    later = request_of("--mcp files,calc Go", approvals)
    assert later["tools"] == [
        {
            "type": "mcp",
            "server_label": "files",
            "require_approval": {"never": {"tool_names": ["read_file"]}},
        },
        {"type": "mcp", "server_label": "calc"},
    ]
    client = ScriptedClient([Turn(items=(approval(1),)), Turn(deltas=("Again.",))])
    answer, _ = start(client, approvals)
    assert (answer.status, answer.text) == ("completed", "Again.")
    assert answer.state.tool_calls["mcpr_1"].decision == "auto"
    assert client.requests[1]["input"][0]["approve"] is True


def test_always_with_a_deny_or_a_function_call_approves_nothing_more() -> None:
    approvals = McpApprovals()
    client = ScriptedClient([Turn(items=(approval(1), approval(2))), Turn(deltas=("Ok.",))])
    answer, _ = start(client, approvals)
    answer.handle_message(
        {"type": "decide", "call_id": "mcpr_1", "decision": "deny", "always": True}
    )
    assert answer.state.tool_calls["mcpr_2"].decision == "pending"
    assert not approvals.allows("files", "read_file")
    answer.approve("mcpr_2")
    answer.wait(5)
    assert answer.status == "completed"


def test_the_terminal_asks_with_always_for_mcp_calls(make_shell: Any) -> None:  # noqa: F811
    shell = make_shell(
        Turn(items=(approval(1),)),
        Turn(items=(ran(2, "mcpr_1"), approval(2))),
        Turn(deltas=("done",)),
        replies=["a"],
    )
    answer = shell.lmsp("ask --mcp files --tool-choice files:read_file Read it")
    assert shell.prompts == [f"\nRun files:read_file({READ})? [y/N/a(lways)] "]
    assert (answer.status, answer.text) == ("completed", "done")
    assert shell.session.mcp_approvals.allows("files", "read_file")
    assert [json.dumps(r.get("input")[0]) for r in shell.client.requests[1:]] == [
        json.dumps(
            {"type": "mcp_approval_response", "approval_request_id": f"mcpr_{n}", "approve": True}
        )
        for n in (1, 2)
    ]


def test_approve_all_always_approves_each_waiting_call_once() -> None:
    client = ScriptedClient([Turn(items=(approval(1), approval(2))), Turn(deltas=("Ok.",))])
    answer, _ = start(client)
    answer.approve(always=True)
    answer.wait(5)
    calls = answer.state.tool_calls
    assert [calls[f"mcpr_{n}"].decision for n in (1, 2)] == ["approved", "auto"]
    assert len(client.requests) == 2
