"""The LMSP lab extension in real JupyterLab: answers without their kernel, side panel, status bar.

The MIME renderer follows a running task from the browser, so an answer saved mid-stream goes
on streaming after its kernel is shut down and the page reloaded; a finished answer renders from
its saved state after the server has purged the task. The side panel lists the user's tasks and
cancels them; the status-bar item says when the service generates.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID
from tests.conftest import LiveServer, stop_server
from tests.helpers import ROOT, message_text
from tests.ui import lab as ui

# Finished tasks lose their events after 1 s and are gone after 2 s; purged every second.
PURGING: dict[str, object] = {
    "TaskStore": {
        "event_retention_seconds": 1,
        "task_retention_seconds": 2,
        "purge_interval_seconds": 1,
    }
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """JupyterLab with the LMSP lab extension."""
    server = ui.start_lab(tmp_path_factory.mktemp("lab-extension"), lab_extension=True)
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def purging_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """JupyterLab with the LMSP lab extension whose service forgets finished tasks at once."""
    server = ui.start_lab(
        tmp_path_factory.mktemp("lab-purging"), lab_extension=True, config=PURGING
    )
    yield server
    stop_server(server)


def bundled_model(lab: LiveServer) -> dict[str, Any]:
    """The bundled model as ``GET /models`` lists it."""
    with lab.client() as client:
        models = client.get("/models").json()["data"]
    (model,) = [model for model in models if model["id"] == BUNDLED_MODEL_ID]
    return dict(model)


def test_a_running_answer_streams_on_after_its_kernel_is_shut_down(
    browser: Browser, lab: LiveServer
) -> None:
    notebook = ui.open_story(browser, lab, "orphan.ipynb", 320)
    notebook.stream()
    notebook.save()
    state = ui.saved_answer(lab, notebook.name, 1)
    (round_,) = state["rounds"]
    task = round_["task_id"]
    assert round_["response"] is None  # saved mid-stream: the round is still running
    assert state["status"] == "queued"  # the kernel's last word, at the round's start
    assert state["model"] == BUNDLED_MODEL_ID
    assert notebook.task_id(1) == task
    before_reload = notebook.message(1)

    kernel = state["kernel_id"]
    assert kernel in ui.running_kernels(lab)
    ui.shutdown_kernel(lab, kernel)
    assert kernel not in ui.running_kernels(lab)

    ui.reopen_without_kernel(notebook)
    status_at_reload = ui.server_task(lab, task)["status"]
    notebook.wait_until(lambda: notebook.answer(1).count() > 0, 60, "the answer after reload")
    assert notebook.task_id(1) == task
    # The text grows while the task runs: at least three growing texts shown as in_progress,
    # read with no kernel behind the page.
    seen = notebook.growing_texts(1, 240, "the text to grow after the reload")
    assert len(seen) >= 3, f"the task was {status_at_reload} at the reload; seen: {seen}"
    assert notebook.wait_final(1) == "incomplete"  # 320 tokens of a story: cut by max tokens
    final = ui.normalized(notebook.message(1))
    for text in [before_reload, *seen]:
        assert final.startswith(ui.normalized(text)[:-1])
    task_state = ui.server_task(lab, task)
    assert task_state["status"] == "incomplete"
    # The server's text exactly: nothing replayed twice after the reload, nothing missing.
    assert final == ui.normalized(message_text(task_state["result"]))
    assert kernel not in ui.running_kernels(lab)
    assert notebook.page.locator(".jp-Toolbar-kernelName").first.inner_text() == "No Kernel"
    print(f"\nthe task was {status_at_reload} at the reload; seen growing: {len(seen)} texts")


def test_a_finished_answer_renders_after_its_task_is_purged(
    browser: Browser, purging_lab: LiveServer
) -> None:
    lab = purging_lab
    name = ui.write_notebook(
        lab,
        "purged.ipynb",
        ui.LOAD,
        "answer = " + ui.STORY.format(n=24),
        "answer.wait();",
    )
    notebook = ui.open_notebook(browser, lab, name)
    for index in (0, 1, 2):
        notebook.run(index)
    assert notebook.wait_final(1) == "incomplete"
    notebook.wait_idle()  # answer.wait() has returned: the kernel's final state is shown
    task = notebook.task_id(1)
    shown = notebook.message(1)
    notebook.save()
    state = ui.saved_answer(lab, name, 1)
    assert state["status"] == "incomplete"
    (round_,) = state["rounds"]
    assert round_["task_id"] == task
    response = round_["response"]
    assert response["status"] == "incomplete"
    text = message_text(response)
    assert text.strip()
    assert ui.normalized(shown) == ui.normalized(text)

    ui.shutdown_kernel(lab, state["kernel_id"])
    with lab.client() as client:
        notebook.wait_until(
            lambda: client.get(f"/tasks/{task}").status_code == 404, 60, "the task purged"
        )
        assert client.get(f"/tasks/{task}/events").status_code == 404
    ui.reopen_without_kernel(notebook)
    notebook.wait_until(lambda: notebook.status(1) != "", 60, "the answer after reload")
    assert notebook.status(1) == "incomplete"
    assert notebook.task_id(1) == task
    assert ui.normalized(notebook.message(1)) == ui.normalized(text)
    answer = notebook.answer(1)
    assert answer.locator(".lmsp-stop").is_hidden()
    assert answer.locator(".lmsp-note").is_hidden()  # nothing followed, nothing missing


def test_the_side_panel_lists_a_running_task_and_cancels_it(
    browser: Browser, lab: LiveServer
) -> None:
    notebook = ui.open_story(browser, lab, "panel.ipynb", 400)
    task = notebook.stream()
    panel = notebook.open_panel()

    row = panel.locator(f'.lmsp-panel-task[data-task-id="{task}"]')
    notebook.wait_until(
        lambda: row.count() == 1 and row.get_attribute("data-status") == "in_progress",
        60,
        "the running task in the panel",
    )
    assert row.locator(".lmsp-panel-task-id").inner_text() == task
    assert str(row.locator(".lmsp-panel-badge").text_content()) == "in_progress"
    cancel = row.locator(".lmsp-panel-cancel")
    assert cancel.count() == 1
    assert cancel.is_enabled()

    model = bundled_model(lab)
    model_row = panel.locator(f'.lmsp-panel-model[data-model-id="{BUNDLED_MODEL_ID}"]')
    assert model_row.count() == 1
    assert model_row.locator(".lmsp-panel-model-id").inner_text() == BUNDLED_MODEL_ID
    assert model_row.get_attribute("data-status") == "loaded"
    details = str(model_row.locator(".lmsp-panel-details").text_content()).split(" · ")
    assert details[1:3] == [f"{model['context_length']:,} ctx", "base model"]
    notebook.screenshot("side-panel.png")

    cancel.click()
    notebook.wait_until(
        lambda: row.get_attribute("data-status") == "cancelled", 60, "the row cancelled"
    )
    assert str(row.locator(".lmsp-panel-badge").text_content()) == "cancelled"
    assert row.locator(".lmsp-panel-cancel").count() == 0
    assert ui.server_task(lab, task)["status"] == "cancelled"
    assert notebook.wait_final(1) == "cancelled"


def test_the_status_bar_says_when_the_service_generates(browser: Browser, lab: LiveServer) -> None:
    notebook = ui.open_story(browser, lab, "status.ipynb", 160)
    item = notebook.page.locator(".lmsp-statusbar")
    with lab.client() as client:
        assert client.get("/tasks", params={"status": "in_progress"}).json()["data"] == []
        models = client.get("/models").json()["data"]
    loaded = [model["id"] for model in models if model["status"] == "loaded"]
    shown_model = loaded[0] if loaded else "no model loaded"
    notebook.wait_until(
        lambda: item.inner_text() == f"LMSP: {shown_model} · idle", 30, "the idle status bar"
    )
    assert item.get_attribute("data-state") == "idle"

    notebook.run(0)
    notebook.run(1)
    notebook.wait_until(
        lambda: (
            item.get_attribute("data-state") == "generating"
            and BUNDLED_MODEL_ID in item.inner_text()
        ),
        120,
        "the status bar generating",
    )
    assert item.inner_text() == f"LMSP: {BUNDLED_MODEL_ID} · ⟳ generating"
    notebook.screenshot("status-bar.png")

    assert notebook.wait_final(1) == "incomplete"
    notebook.wait_until(
        lambda: item.get_attribute("data-state") == "idle", 30, "the status bar idle again"
    )
    assert item.inner_text() == f"LMSP: {BUNDLED_MODEL_ID} · idle"


def test_the_quickstart_runs_all_its_cells(browser: Browser, lab: LiveServer) -> None:
    source = (ROOT / "notebooks" / "quickstart.ipynb").read_text()
    code = ["".join(c["source"]) for c in json.loads(source)["cells"] if c["cell_type"] == "code"]
    asks = sum(cell.startswith("%%lmsp") or "%lmsp ask" in cell for cell in code)
    (Path(lab.root_dir) / "quickstart.ipynb").write_text(source)
    notebook = ui.open_notebook(browser, lab, "quickstart.ipynb")
    page = notebook.page
    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    panel = page.locator(".jp-NotebookPanel:visible")

    def all_final() -> bool:
        # text contents: the cells out of view are not laid out
        shown = panel.locator(".lmsp-answer .lmsp-status").all_text_contents()
        statuses = [status.strip().lower() for status in shown]
        return len(statuses) == asks and all(s in ui.FINAL_STATUSES for s in statuses)

    notebook.wait_until(all_final, 600, "every answer of the quickstart final")
    notebook.wait_idle(600)
    errors = panel.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.error"]')
    assert errors.count() == 0
    notebook.cell(0).scroll_into_view_if_needed()
    notebook.screenshot("quickstart.png")
    inputs = panel.locator(".jp-Cell .jp-InputArea-editor").all_text_contents()
    (question,) = [i for i, text in enumerate(inputs) if "capital of France?" in text]
    notebook.cell(question - 2).scroll_into_view_if_needed()
    notebook.screenshot("quickstart-question.png")
