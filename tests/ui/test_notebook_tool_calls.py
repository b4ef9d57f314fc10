"""Notebook tools in real JupyterLab: an approved call changes the notebook, a denied one does not.

The bundled base model never calls a tool by itself: ``--tool-choice`` forces the call and the
tool's JSON Schema shapes its arguments. The test reads the arguments the model chose from the
server and checks the notebook against them, never against text fixed here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from playwright.sync_api import Browser

from lmsp_jupyter.kernel.tools import DECLINED
from tests.conftest import LiveServer, stop_server
from tests.ui import lab as ui

ASK = (
    "%lmsp ask --notebook-tools --tool-choice {tool} --max-tokens 64 --temperature 0 "
    "--frequency-penalty 1 {prompt}"
)
#: The notebook: load, the ask (cell 1, the cell that asks), a cell below it.
BELOW = "x = 41"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """JupyterLab with the LMSP lab extension, whose view of an ask performs notebook tools."""
    server = ui.start_lab(tmp_path_factory.mktemp("lab-notebook-tools"), lab_extension=True)
    yield server
    stop_server(server)


def asked(browser: Browser, lab: LiveServer, name: str, ask: str) -> tuple[ui.Notebook, Any]:
    """Open a notebook of ``LOAD``, ``ask`` and ``BELOW``, run the ask; its call, waiting."""
    notebook = ui.open_notebook(browser, lab, ui.write_notebook(lab, name, ui.LOAD, ask, BELOW))
    notebook.run(0)
    notebook.run(1)
    notebook.wait_approve(1, 180)
    assert notebook.status(1) == "requires_action"
    (call,) = [
        item
        for item in ui.server_task(lab, notebook.task_id(1))["result"]["output"]
        if item["type"] == "function_call"
    ]
    return notebook, call


def saved(notebook: ui.Notebook) -> list[tuple[str, str]]:
    """The cells (type, source) of the notebook as JupyterLab saves it."""
    notebook.save()
    cells = nbformat.read(Path(notebook.lab.root_dir) / notebook.name, as_version=4).cells
    return [(cell.cell_type, cell.source) for cell in cells]


def test_an_approved_insert_cell_inserts_the_models_cell(browser: Browser, lab: LiveServer) -> None:
    ask = ASK.format(tool="insert_cell", prompt="Add a cell that prints hello.")
    notebook, call = asked(browser, lab, "insert.ipynb", ask)
    assert call["name"] == "insert_cell"
    arguments = json.loads(call["arguments"])
    # Where the arguments put the cell (as list.insert: clamped), with exactly their source.
    cells = [("code", ui.LOAD), ("code", ask), ("code", BELOW)]
    index = arguments.get("index")
    at = 2 if index is None else index + 1 if arguments.get("relative") else index
    at = min(max(at, 0), len(cells))
    cell_type = arguments.get("cell_type", "code")
    cells.insert(at, (cell_type, arguments["source"]))
    asking = 2 if at <= 1 else 1  # a cell inserted above the asking cell moves it down
    notebook.screenshot("notebook-tool-renderer.png")
    notebook.wait_approve(1, 10).first.click()
    assert notebook.wait_final(asking) in ("completed", "incomplete")

    assert saved(notebook) == cells
    (decided,) = ui.saved_answer(lab, notebook.name, asking)["tool_calls"].values()
    assert (decided["decision"], decided["runs_in"]) == ("approved", "notebook")
    assert json.loads(decided["output"]) == {"index": at, "cell_type": cell_type}
    card = notebook.cell(asking).locator(".lmsp-call").first
    assert card.get_attribute("data-decision") == "approved"
    assert card.get_attribute("data-runs-in") == "notebook"


def test_a_denied_replace_cell_changes_nothing(browser: Browser, lab: LiveServer) -> None:
    ask = ASK.format(tool="replace_cell", prompt="Set x to 42 in the cell below.")
    notebook, call = asked(browser, lab, "deny.ipynb", ask)
    assert call["name"] == "replace_cell"
    notebook.cell(1).locator(".lmsp-deny").first.click()
    assert notebook.wait_final(1) in ("completed", "incomplete")
    assert saved(notebook) == [("code", ui.LOAD), ("code", ask), ("code", BELOW)]
    (decided,) = ui.saved_answer(lab, notebook.name, 1)["tool_calls"].values()
    assert (decided["decision"], decided["output"]) == ("denied", DECLINED)
