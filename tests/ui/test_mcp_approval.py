"""MCP tools in real JupyterLab: the approval card in the asking cell, back after a reload without
saving, approved there; the call's real result shows, and the side panel lists the server.

The MCP server is npm's ``@modelcontextprotocol/server-filesystem``, unmodified, over stdio,
configured in the ``mcp.json`` of the lab's Jupyter config directory. The bundled base model
calls a tool only when forced: ``--tool-choice files:list_allowed_directories`` (no arguments),
whose output is the server's own answer, which the test reads from the server's task.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser

from tests.conftest import LiveServer, stop_server
from tests.helpers import MCP_FILESYSTEM, mcp_stdio_server
from tests.ui import lab as ui
from tests.ui.test_restore import notebook_tasks, opened, reload_unsaved

ASK = (
    "%lmsp ask --mcp files --tool-choice files:list_allowed_directories --max-tokens 24 "
    "--temperature 0 Which directories may you read?"
)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The filesystem server's one allowed directory."""
    return tmp_path_factory.mktemp("mcp-files")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, files: Path) -> Iterator[LiveServer]:
    """JupyterLab whose service runs the filesystem server as ``files``, without autosave."""
    tmp = tmp_path_factory.mktemp("lab-mcp")
    (tmp / "config").mkdir()
    servers = {"files": mcp_stdio_server(MCP_FILESYSTEM, str(files))}
    (tmp / "config" / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
    docmanager = tmp / "settings" / "@jupyterlab" / "docmanager-extension"
    docmanager.mkdir(parents=True)
    (docmanager / "plugin.jupyterlab-settings").write_text('{"autosave": false}')
    server = ui.start_lab(tmp, lab_extension=True)
    yield server
    stop_server(server)


def items(task: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The output items of a finished task's response of type ``kind``."""
    return [item for item in task["result"]["output"] if item["type"] == kind]


@pytest.mark.timeout(1200)  # a busy machine generates slowly
def test_an_mcp_approval_comes_back_after_a_reload_and_its_approved_call_shows_its_result(
    browser: Browser, lab: LiveServer, files: Path
) -> None:
    name = ui.write_notebook(lab, "mcp.ipynb", ui.LOAD, ASK)
    notebook = opened(browser, lab, name)
    notebook.run(0)
    notebook.run(1)
    approve = notebook.wait_approve(1, 300)
    (first,) = notebook_tasks(lab, name)
    (request,) = items(first, "mcp_approval_request")
    assert (request["server_label"], request["name"]) == ("files", "list_allowed_directories")
    assert items(first, "mcp_call") == []  # nothing ran before the approval

    reload_unsaved(notebook)  # nothing saved: the card comes back from the task
    notebook.wait_until(lambda: approve.count() > 0, 30, "the approval card back in its cell")
    assert approve.first.is_enabled()  # the kernel that asked still runs: the click reaches it
    assert notebook.status(1) == "requires_action"
    assert notebook.task_id(1) == first["id"]
    card = notebook.cell(1).locator('.lmsp-call[data-type="mcp_approval_request"]')
    assert card.get_attribute("data-call-id") == request["id"]
    assert card.get_attribute("data-decision") == "pending"
    assert card.locator(".lmsp-call-server").inner_text() == "files"
    assert card.locator(".lmsp-call-name").inner_text() == "list_allowed_directories"
    assert card.locator(".lmsp-always").is_enabled()
    notebook.screenshot("mcp-approval.png")

    approve.first.click()  # the kernel answers the approval; the service runs the call
    status = notebook.wait_final(1, 600)
    second, earlier = notebook_tasks(lab, name)
    assert earlier["id"] == first["id"]
    assert status == ui.server_task(lab, second["id"])["status"]
    continued = ui.server_task(lab, second["id"])
    (call,) = items(continued, "mcp_call")
    assert call["approval_request_id"] == request["id"]
    assert call["error"] is None
    assert files.name in call["output"]  # the server's own answer: its allowed directory
    assert card.get_attribute("data-decision") == "approved"
    shown = notebook.cell(1).locator(".lmsp-mcp-call .lmsp-call-output pre")
    assert ui.normalized(shown.inner_text()) == ui.normalized(call["output"])
    assert notebook.cell(1).locator(".lmsp-answer").count() == 1

    panel = notebook.open_panel()
    server = panel.locator('.lmsp-panel-server[data-server-id="files"]')
    notebook.wait_until(
        lambda: server.count() == 1 and server.get_attribute("data-status") == "running",
        30,
        "the filesystem server running in the side panel",
    )
    tools = server.locator(".lmsp-panel-tool").all_text_contents()  # folded under Tools
    assert "list_allowed_directories" in tools
    server.locator(".lmsp-panel-server-tools summary").click()
    notebook.screenshot("mcp-panel.png")
