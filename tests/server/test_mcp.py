"""MCP tools on responses and tasks (11.6), with real MCP servers, unmodified: the npm
reference servers ``server-everything`` and ``server-filesystem`` over stdio, and a
Streamable HTTP server made with the Python SDK (``tests/mcp_http_server.py``).

The model is the scripted engine: its forced calls name the tool and arguments a test needs
(a forced call's arguments are the decoder's to enforce, which the real-model tests show in
``tests/compat/test_openai_mcp.py``), so each test asserts what the servers really did.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from traitlets.config import Config

from tests.helpers import (
    MCP_EVERYTHING,
    MCP_FILESYSTEM,
    eventually_async,
    mcp_http_server,
    mcp_stdio_server,
)
from tests.server.helpers import ask, assert_problem, scripted_engine, server_config

NOTE = "The note the filesystem server reads.\n"
#: How long a call may take here: the hanging tool's calls end after it.
CALL_TIMEOUT = 4.0


def forced(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A script whose first generation is a forced call of ``name``, the next ones text."""
    call = json.dumps({"name": name, "arguments": arguments})
    return {"deltas": [call[:20], call[20:]]}


AFTER = {"deltas": ["Done."]}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The filesystem server's one allowed directory, with a note in it."""
    directory = tmp_path_factory.mktemp("mcp-files")
    (directory / "note.txt").write_text(NOTE)
    return directory


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the HTTP server's ``note`` tool writes each call down."""
    return tmp_path_factory.mktemp("mcp-record") / "notes.txt"


@pytest.fixture(scope="module")
def http_url(record: Path) -> Iterator[str]:
    with mcp_http_server(record) as url:
        yield url


@pytest.fixture(scope="module")
def mcp_json(tmp_path_factory: pytest.TempPathFactory, files: Path, http_url: str) -> Path:
    path = tmp_path_factory.mktemp("mcp-config") / "mcp.json"
    servers = {
        "everything": mcp_stdio_server(MCP_EVERYTHING, "stdio", autoApprove=["echo"]),
        "files": mcp_stdio_server(MCP_FILESYSTEM, str(files)),
        "py": {"type": "http", "url": http_url, "headers": {"X-Test": "${env:HOME}"}},
        "off": {"command": "true", "disabled": True},
    }
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest, mcp_json: Path) -> Config:
    config = server_config(request, sse_keepalive_seconds=0.05)
    config.McpServers = Config({"config_file": str(mcp_json), "call_timeout_seconds": CALL_TIMEOUT})
    return config


def mcp(label: str, **fields: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": label, **fields}


def choose(label: str, name: str) -> dict[str, Any]:
    return {"type": "mcp", "server_label": label, "name": name}


def items(response: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [item for item in response["output"] if item["type"] == kind]


def noted(record: Path) -> str:
    """What the HTTP server's ``note`` tool wrote down."""
    return record.read_text() if record.exists() else ""


def forget(record: Path) -> None:
    record.unlink(missing_ok=True)


async def respond(lmsp: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    answer = await lmsp.post("/responses", json=ask(**fields))
    assert answer.status_code == 200, answer.text
    reply: dict[str, Any] = answer.json()
    return reply


async def finished_task(lmsp: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    """Run a task to its end; its response."""
    created = await lmsp.post("/tasks", json={"type": "response", "request": ask(**fields)})
    assert created.status_code == 202, created.text
    task_id = created.json()["id"]

    async def ended() -> dict[str, Any] | None:
        task: dict[str, Any] = (await lmsp.get(f"/tasks/{task_id}")).json()
        return task if task["status"] in ("completed", "failed", "incomplete") else None

    task = await eventually_async(ended, what="the task ending")
    response: dict[str, Any] = (await lmsp.get(f"/responses/{task['response_id']}")).json()
    return response


# --- listing and calling ------------------------------------------------------------------------


@pytest.mark.script(forced("read_text_file", {"path": "note.txt"}), AFTER)
async def test_a_forced_call_reads_the_file_through_the_filesystem_server(
    lmsp: httpx.AsyncClient,
) -> None:
    reply = await respond(
        lmsp,
        tools=[mcp("files", require_approval="never")],
        tool_choice=choose("files", "read_text_file"),
    )
    assert reply["status"] == "completed", reply
    (listing,) = items(reply, "mcp_list_tools")
    names = {tool["name"] for tool in listing["tools"]}
    assert {"read_text_file", "write_file", "list_directory"} <= names
    assert all("input_schema" in tool for tool in listing["tools"])
    (call,) = items(reply, "mcp_call")
    assert call["server_label"] == "files" and call["name"] == "read_text_file"
    assert json.loads(call["arguments"]) == {"path": "note.txt"}
    assert call["output"] == NOTE and call["error"] is None
    assert [item["type"] for item in reply["output"]] == ["mcp_list_tools", "mcp_call", "message"]


@pytest.mark.script(forced("echo", {"message": "hi"}), AFTER)
async def test_the_stream_has_the_mcp_events_and_the_servers_are_listed(
    lmsp: httpx.AsyncClient,
) -> None:
    body = ask(tools=[mcp("everything")], tool_choice=choose("everything", "echo"), stream=True)
    async with lmsp.stream("POST", "/responses", json=body) as answer:
        lines = [line async for line in answer.aiter_lines()]
    names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    datas = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert "response.mcp_list_tools.completed" in names
    assert names.index("response.mcp_call_arguments.done") < names.index(
        "response.mcp_call.in_progress"
    )
    assert names.index("response.mcp_call.in_progress") < names.index("response.mcp_call.completed")
    assert names[-1] == "response.completed"
    done = [d["item"] for d in datas if d["type"] == "response.output_item.done"]
    (call,) = [item for item in done if item["type"] == "mcp_call"]
    # echo is in the server's autoApprove: it ran with no approval asked
    assert call["output"] == "Echo: hi"

    servers = (await lmsp.get("/mcp/servers")).json()
    assert servers["object"] == "list"
    by_label = {server["label"]: server for server in servers["data"]}
    assert list(by_label) == ["everything", "files", "py", "off"]
    assert by_label["everything"]["state"] == "running"
    assert by_label["everything"]["transport"] == "stdio"
    assert "echo" in {tool["name"] for tool in by_label["everything"]["tools"]}
    assert by_label["py"] == {
        "label": "py",
        "transport": "http",
        "state": "stopped",
        "error": None,
        "disabled": False,
        "tools": None,
    }
    assert by_label["off"]["disabled"] is True


@pytest.mark.script(forced("add", {"a": 2, "b": 40}), AFTER)
async def test_the_http_server_answers_and_a_follow_up_reuses_the_listing(
    lmsp: httpx.AsyncClient,
) -> None:
    tools = [mcp("py", require_approval={"never": {"tool_names": ["add"]}})]
    first = await respond(lmsp, tools=tools, tool_choice=choose("py", "add"), store=True)
    (call,) = items(first, "mcp_call")
    assert call["output"] == "42"
    again = await respond(
        lmsp, tools=tools, previous_response_id=first["id"], input="And now?", store=True
    )
    assert items(again, "mcp_list_tools") == []  # listed once per conversation


# --- approval ------------------------------------------------------------------------------------


@pytest.mark.script(forced("note", {"text": "approved once"}), AFTER)
async def test_an_approved_call_runs_once_after_the_task_waited(
    lmsp: httpx.AsyncClient, record: Path
) -> None:
    forget(record)
    tools = [mcp("py")]  # require_approval: "always" by default
    waiting = await finished_task(lmsp, tools=tools, tool_choice=choose("py", "note"), store=True)
    assert waiting["status"] == "completed"
    (request,) = items(waiting, "mcp_approval_request")
    assert request["name"] == "note" and request["server_label"] == "py"
    assert json.loads(request["arguments"]) == {"text": "approved once"}
    assert items(waiting, "mcp_call") == [] and noted(record) == ""

    approval = {"type": "mcp_approval_response", "approval_request_id": request["id"]}
    answer = {"tools": tools, "previous_response_id": waiting["id"], "store": True}
    approved = await finished_task(lmsp, input=[{**approval, "approve": True}], **answer)
    (call,) = items(approved, "mcp_call")
    assert call["approval_request_id"] == request["id"]
    assert call["output"] == "noted: approved once"
    assert items(approved, "message")  # the model went on
    again = await finished_task(lmsp, input=[{**approval, "approve": True}], **answer)
    assert items(again, "mcp_call") == []
    assert noted(record) == "approved once\n"


@pytest.mark.script(forced("write_file", {"path": "denied.txt", "content": "x"}), AFTER)
async def test_a_denied_write_never_happens_and_the_model_is_told(
    lmsp: httpx.AsyncClient, files: Path, jp_serverapp: Any
) -> None:
    tools = [mcp("files", require_approval="always")]
    asked = await respond(lmsp, tools=tools, tool_choice=choose("files", "write_file"), store=True)
    (request,) = items(asked, "mcp_approval_request")
    denial = {
        "type": "mcp_approval_response",
        "approval_request_id": request["id"],
        "approve": False,
        "reason": "not now",
    }
    denied = await respond(
        lmsp, tools=tools, previous_response_id=asked["id"], input=[denial], store=True
    )
    assert denied["status"] == "completed"
    assert items(denied, "mcp_call") == []
    assert not (files / "denied.txt").exists()
    told = [m.content for m in scripted_engine(jp_serverapp).prompts[-1] if m.role == "tool"]
    assert told == ["The user denied this call; it did not run: not now"]


# --- failures ------------------------------------------------------------------------------------


@pytest.mark.script(forced("hang", {}), AFTER)
async def test_a_call_that_hangs_ends_with_an_error_and_the_answer_goes_on(
    lmsp: httpx.AsyncClient,
) -> None:
    reply = await respond(
        lmsp, tools=[mcp("py", require_approval="never")], tool_choice=choose("py", "hang")
    )
    assert reply["status"] == "completed"
    (call,) = items(reply, "mcp_call")
    assert call["output"] is None
    assert f"more than {CALL_TIMEOUT:g} s" in call["error"]
    assert items(reply, "message")


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _server_process(script: Path) -> int:
    """The one process of this test's server running ``script``."""
    found = []
    for pid in _children(os.getpid()):
        try:
            command = (Path("/proc") / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        if str(script).encode() in command:
            found.append(pid)
    (pid,) = found
    return pid


@pytest.mark.script(
    forced("trigger-long-running-operation", {"duration": 60, "steps": 60}),
    AFTER,
    forced("echo", {"message": "back"}),
    AFTER,
)
async def test_a_server_killed_mid_call_gives_an_error_and_starts_again_on_next_use(
    lmsp: httpx.AsyncClient,
) -> None:
    tools = [mcp("everything", require_approval="never")]
    choice = choose("everything", "trigger-long-running-operation")
    created = await lmsp.post(
        "/tasks", json={"type": "response", "request": ask(tools=tools, tool_choice=choice)}
    )
    task_id = created.json()["id"]
    killed = False
    async with lmsp.stream("GET", f"/tasks/{task_id}/events") as events:
        async for line in events.aiter_lines():
            if line == "event: response.mcp_call.in_progress":
                pid = _server_process(MCP_EVERYTHING)
                os.killpg(pid, signal.SIGKILL)  # its group: node and a launcher of it
                killed = True
    assert killed
    task = (await lmsp.get(f"/tasks/{task_id}")).json()
    assert task["status"] == "completed"
    response = (await lmsp.get(f"/responses/{task['response_id']}")).json()
    (call,) = items(response, "mcp_call")
    assert call["output"] is None and call["error"]
    assert "more than" not in call["error"]  # the crash, not the timeout
    assert items(response, "message")  # the answer went on

    servers = {s["label"]: s for s in (await lmsp.get("/mcp/servers")).json()["data"]}
    assert servers["everything"]["state"] == "failed"
    assert servers["everything"]["error"]
    again = await respond(lmsp, tools=tools, tool_choice=choose("everything", "echo"))
    assert items(again, "mcp_call")[0]["output"] == "Echo: back"
    servers = {s["label"]: s for s in (await lmsp.get("/mcp/servers")).json()["data"]}
    assert servers["everything"]["state"] == "running"


async def test_an_unknown_label_a_request_url_and_a_disabled_server_are_400s(
    lmsp: httpx.AsyncClient,
) -> None:
    unknown = await lmsp.post("/responses", json=ask(tools=[mcp("nowhere")]))
    assert assert_problem(unknown, 400, "invalid_request")["param"] == "tools[0].server_label"
    url = mcp("mine", server_url="http://127.0.0.1:9/mcp")
    refused = await lmsp.post(
        "/responses", json=ask(tools=[{"type": "function", "name": "f"}, url])
    )
    assert assert_problem(refused, 400, "invalid_request")["param"] == "tools[1].server_url"
    disabled = await lmsp.post("/responses", json=ask(tools=[mcp("off")]))
    assert assert_problem(disabled, 400, "invalid_request")["param"] == "tools[0].server_label"
    choice = await lmsp.post(
        "/responses", json=ask(tools=[mcp("py")], tool_choice=choose("files", "read_text_file"))
    )
    assert assert_problem(choice, 400, "invalid_request")["param"] == "tool_choice.server_label"
    chat = await lmsp.post(
        "/chat/completions",
        json={
            "model": ask()["model"],
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [mcp("py")],
        },
    )
    assert chat.status_code == 400
