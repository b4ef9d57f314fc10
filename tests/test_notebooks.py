"""The demo notebooks run headless (nbclient) against a live server with the real model."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import MODEL, LiveServer

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
TASK_MIME = "application/vnd.lmsp.task+json"


@pytest.fixture
def kernel_env(live_server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a kernel started by the server inherits: where the service is, and a token."""
    monkeypatch.setenv("LMSP_URL", live_server.lmsp)
    monkeypatch.setenv("LMSP_TOKEN", live_server.token)


def run(name: str) -> list[Any]:
    """Execute a demo notebook in a fresh kernel; return its code cells."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def cell(cells: list[Any], start: str) -> Any:
    """The one code cell whose source starts with ``start``."""
    (found,) = [c for c in cells if c.source.startswith(start)]
    return found


def result(code_cell: Any) -> Any:
    """The cell's ``execute_result``, evaluated from its text/plain repr."""
    (value,) = [o for o in code_cell.outputs if o["output_type"] == "execute_result"]
    return ast.literal_eval(value["data"]["text/plain"])


def printed(code_cell: Any) -> str:
    """What the cell printed (``!`` commands print through a terminal: CRLF made LF)."""
    text = "".join(o.get("text", "") for o in code_cell.outputs if o["output_type"] == "stream")
    return text.replace("\r\n", "\n")


def answer_states(code_cell: Any) -> list[dict[str, Any]]:
    """The answer states (task MIME data) the cell displayed."""
    return [
        o["data"][TASK_MIME]
        for o in code_cell.outputs
        if o["output_type"] in ("display_data", "execute_result") and TASK_MIME in o["data"]
    ]


def no_errors(cells: list[Any]) -> None:
    errors = [o for c in cells for o in c.outputs if o["output_type"] == "error"]
    assert errors == []


@pytest.mark.usefixtures("kernel_env")
def test_quickstart_asks_streams_continues_shows_logprobs_and_stops() -> None:
    cells = run("quickstart.ipynb")
    no_errors(cells)
    (row,) = printed(cell(cells, "%lmsp models")).splitlines()
    model, status, window, kind, *_ = row.split()
    assert (model, window, kind) == (MODEL, "8192", "base")
    assert status in ("available", "loaded")
    (state,) = answer_states(cell(cells, "answer = %lmsp ask"))
    assert state["model"] == MODEL
    assert state["rounds"][0]["task_id"].startswith("task_")
    text = result(cell(cells, "answer.wait().text"))
    assert isinstance(text, str) and text.strip()
    status, more = result(cell(cells, "more.wait()"))
    assert status in ("completed", "incomplete") and more.strip()
    (continued,) = answer_states(cell(cells, "more = %lmsp ask --continue"))
    assert continued["rounds"][0]["task_id"] != state["rounds"][0]["task_id"]
    # A question ending in "?" is asked, not taken for IPython's help.
    (question,) = answer_states(cell(cells, "%lmsp ask --max-tokens 16 --temperature 0 What"))
    assert question["rounds"][0]["task_id"].startswith("task_")
    assert result(cell(cells, "story.cancel()")) == "cancelled"
    tasks = printed(cell(cells, "%lmsp tasks"))
    assert state["rounds"][0]["task_id"] in tasks
    logprobs = result(cell(cells, "import math"))
    assert logprobs and all(isinstance(token, str) and 0 <= p <= 1 for token, p in logprobs)
    (loop,) = answer_states(cell(cells, "loop = %lmsp ask"))
    (unloop,) = answer_states(cell(cells, "unloop = %lmsp ask"))
    assert loop["model"] == unloop["model"] == MODEL


@pytest.mark.usefixtures("kernel_env")
def test_tools_notebook_runs_the_approved_function_and_continues() -> None:
    cells = run("tools.ipynb")
    no_errors(cells)
    schema = result(cell(cells, "word_count.definition()"))
    assert schema["name"] == "word_count"
    assert schema["parameters"]["required"] == ["text"]
    assert result(cell(cells, "answer.wait().status")) == "requires_action"
    status, calls = result(cell(cells, "answer.approve()"))
    assert status in ("completed", "incomplete")
    (text,) = calls
    # The saved display shows the call approved, with the function's own result as output.
    (state,) = answer_states(cell(cells, "answer = %lmsp ask"))
    (call,) = state["tool_calls"].values()
    assert call["name"] == "word_count" and call["decision"] == "approved"
    assert call["output"] == str(len(text.split()))
    assert len(state["rounds"]) == 2 and state["status"] == status
    status, types = result(cell(cells, "total.wait()"))
    assert status in ("completed", "incomplete")
    assert types and "function_call" not in types
    assert result(cell(cells, "{name: list(tool.parameters")) == {
        "read_cell": ["index", "relative"],
        "insert_cell": ["source", "index", "relative", "cell_type"],
        "replace_cell": ["index", "source", "relative"],
        "run_cell": ["index", "relative"],
    }


@pytest.mark.usefixtures("kernel_env")
def test_structured_output_notebook_gets_json_of_the_schema() -> None:
    cells = run("structured-output.ipynb")
    no_errors(cells)
    city = cell(cells, "City.model_validate_json").outputs[0]["data"]["text/plain"]
    assert city.startswith("City(name=")
    assert result(cell(cells, "import json")) == ["hex", "name"]
    # The enum leaves the model a choice of at least two tokens, each with its probability.
    choices = result(cell(cells, "import math"))
    assert choices and all(len(top) > 1 and all(0 <= p <= 1 for _, p in top) for _, top in choices)


@pytest.mark.usefixtures("kernel_env")
def test_other_tools_notebook_reaches_the_service_with_curl_and_python(
    live_server: LiveServer,
) -> None:
    cells = run("other-tools.ipynb")
    no_errors(cells)
    assert result(cell(cells, "import os")) == live_server.lmsp
    listing = printed(cell(cells, "!curl -s -H"))
    assert '"object": "list"' in listing and MODEL in listing
    streamed = printed(cell(cells, "!curl -s -N"))
    assert streamed.startswith("retry: 2000\nid: 1\nevent: response.created\n")
    assert result(cell(cells, "import httpx")) == (200, "incomplete")
    assert isinstance(result(cell(cells, 'choice["text"]')), str)
    tokens = result(cell(cells, "completion = http.post"))
    assert tokens and all(
        isinstance(token, str) and 1 <= len(top) <= 2 and all(v <= 0 for v in top.values())
        for token, top in tokens
    )
    events = result(cell(cells, "from lmsp_jupyter.client"))
    assert events[0] == "response.created" and events[-1] in ("response.incomplete",)
    assert json.dumps(events).count("response.output_text.delta") >= 1


@pytest.mark.usefixtures("kernel_env")
def test_notebook_context_asks_about_data_explains_the_error_and_edits_a_cell() -> None:
    cells = run("notebook-context.ipynb")
    failing = cell(cells, 'per_city = sales.set_index("city")')
    (error,) = [o for o in failing.outputs if o["output_type"] == "error"]
    assert error["ename"] == "KeyError"
    no_errors([c for c in cells if c is not failing])
    prompt = printed(cell(cells, "print(about.wait().prompt)"))
    assert "sales: pandas.DataFrame, shape (4, 2), columns:" in prompt
    assert "  units: int64" in prompt
    status, has_error = result(cell(cells, "why.wait().status"))
    assert status in ("completed", "incomplete") and has_error
    (diff,) = [
        o["data"]["text/markdown"]
        for o in cell(cells, "edit = %lmsp edit").outputs
        if o["output_type"] == "display_data" and o["data"]["text/markdown"].startswith("```diff")
    ]
    assert diff.endswith("\n```")
    status, kind = result(cell(cells, "edit.status"))
    assert status in ("completed", "incomplete") and kind == "str"
