"""The LMSP lab extension in real JupyterLab: answers without their kernel, side panel, status bar.

The MIME renderer follows a running task from the browser, so an answer saved mid-stream goes
on streaming after its kernel is shut down and the page reloaded; a finished answer renders from
its saved state after the server has purged the task. The side panel lists the user's tasks and
cancels them; the status-bar item says when the service generates.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID
from tests.conftest import LiveServer, stop_server
from tests.ui.lab import (
    Notebook,
    forget_workspaces,
    open_notebook,
    reopen_without_kernel,
    running_kernels,
    saved_answer,
    shutdown_kernel,
    start_lab,
    write_notebook,
)

LOAD = "%load_ext lmsp_jupyter"
STORY = "%lmsp ask --max-tokens {n} --temperature 0 Once upon a time, in a small village,"
FINAL = ("completed", "incomplete", "failed", "cancelled")
# Finished tasks lose their events after 1 s and are gone after 2 s; purged every second.
PURGING: dict[str, object] = {
    "LmspApp": {
        "event_retention_seconds": 1,
        "task_retention_seconds": 2,
        "purge_interval_seconds": 1,
    }
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """JupyterLab with the LMSP lab extension."""
    server = start_lab(tmp_path_factory.mktemp("lab-extension"), lab_extension=True)
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def purging_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """JupyterLab with the LMSP lab extension whose service forgets finished tasks at once."""
    server = start_lab(tmp_path_factory.mktemp("lab-purging"), lab_extension=True, config=PURGING)
    yield server
    stop_server(server)


def open_alone(browser: Browser, lab: LiveServer, name: str) -> Notebook:
    """Open ``name`` as the only notebook of the page (no tabs of earlier tests restored)."""
    forget_workspaces(lab)
    return open_notebook(browser, lab, name)


def status(notebook: Notebook, index: int) -> str:
    """The status word of the answer in cell ``index`` as written (CSS shows it in capitals)."""
    badge = notebook.cell(index).locator(".lmsp-answer .lmsp-status")
    return str(badge.first.text_content()).strip() if badge.count() else ""


def wait_final(notebook: Notebook, index: int) -> str:
    """Wait for a final status in cell ``index``; return it."""
    notebook.wait_until(lambda: status(notebook, index) in FINAL, 240, f"a final status in {index}")
    return status(notebook, index)


def shown_task_id(notebook: Notebook, index: int) -> str:
    """The task id the answer in cell ``index`` shows."""
    shown = notebook.cell(index).locator(".lmsp-answer .lmsp-task-id").first.inner_text()
    match = re.search(r"task_[0-9A-Z]{26}", shown)
    assert match, shown
    return match[0]


def message_text(response: dict[str, Any]) -> str:
    """The message text of a Response (JSON)."""
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def server_task(lab: LiveServer, task: str) -> dict[str, Any]:
    """``GET /tasks/{id}``."""
    with lab.client() as client:
        reply = client.get(f"/tasks/{task}")
        assert reply.status_code == 200, reply.text
        body: dict[str, Any] = reply.json()
        return body


def bundled_model(lab: LiveServer) -> dict[str, Any]:
    """The bundled model as ``GET /models`` lists it."""
    with lab.client() as client:
        models = client.get("/models").json()["data"]
    (model,) = [model for model in models if model["id"] == BUNDLED_MODEL_ID]
    return dict(model)


def normalized(text: str) -> str:
    """Text compared without the whitespace that Markdown rendering changes."""
    return " ".join(text.split())


def test_a_running_answer_streams_on_after_its_kernel_is_shut_down(
    browser: Browser, lab: LiveServer
) -> None:
    name = write_notebook(lab, "orphan.ipynb", LOAD, STORY.format(n=320))
    notebook = open_alone(browser, lab, name)
    notebook.run(0)
    notebook.run(1)
    notebook.wait_until(lambda: len(notebook.message(1)) > 20, 120, "some text")
    notebook.save()
    state = saved_answer(lab, name, 1)
    (round_,) = state["rounds"]
    task = round_["task_id"]
    assert round_["response"] is None  # saved mid-stream: the round is still running
    assert state["status"] == "queued"  # the kernel's last word, at the round's start
    assert state["model"] == BUNDLED_MODEL_ID
    assert shown_task_id(notebook, 1) == task
    before_reload = notebook.message(1)

    kernel = state["kernel_id"]
    assert kernel in running_kernels(lab)
    shutdown_kernel(lab, kernel)
    assert kernel not in running_kernels(lab)

    reopen_without_kernel(notebook)
    status_at_reload = server_task(lab, task)["status"]
    notebook.wait_until(lambda: notebook.answer(1).count() > 0, 60, "the answer after reload")
    assert shown_task_id(notebook, 1) == task
    # The text grows while the task runs: at least three growing texts shown as in_progress,
    # read with no kernel behind the page.
    seen: list[str] = []

    def grown_twice() -> bool:
        text = notebook.message(1)
        if status(notebook, 1) == "in_progress" and (not seen or len(text) > len(seen[-1])):
            seen.append(text)
        return len(seen) >= 3 or status(notebook, 1) in FINAL

    notebook.wait_until(grown_twice, 240, "the text to grow after the reload")
    assert len(seen) >= 3, f"the task was {status_at_reload} at the reload; seen: {seen}"
    assert wait_final(notebook, 1) == "incomplete"  # 320 tokens of a story: cut by max tokens
    final = normalized(notebook.message(1))
    for text in [before_reload, *seen]:
        assert final.startswith(normalized(text)[:-1])
    task_state = server_task(lab, task)
    assert task_state["status"] == "incomplete"
    # The server's text exactly: nothing replayed twice after the reload, nothing missing.
    assert final == normalized(message_text(task_state["result"]))
    assert kernel not in running_kernels(lab)
    assert notebook.page.locator(".jp-Toolbar-kernelName").first.inner_text() == "No Kernel"
    print(f"\nthe task was {status_at_reload} at the reload; seen growing: {len(seen)} texts")


def test_a_finished_answer_renders_after_its_task_is_purged(
    browser: Browser, purging_lab: LiveServer
) -> None:
    lab = purging_lab
    name = write_notebook(
        lab,
        "purged.ipynb",
        LOAD,
        "answer = " + STORY.format(n=24),
        "answer.wait();",
    )
    notebook = open_alone(browser, lab, name)
    for index in (0, 1, 2):
        notebook.run(index)
    assert wait_final(notebook, 1) == "incomplete"
    notebook.wait_idle()  # answer.wait() has returned: the kernel's final state is shown
    task = shown_task_id(notebook, 1)
    shown = notebook.message(1)
    notebook.save()
    state = saved_answer(lab, name, 1)
    assert state["status"] == "incomplete"
    (round_,) = state["rounds"]
    assert round_["task_id"] == task
    response = round_["response"]
    assert response["status"] == "incomplete"
    text = message_text(response)
    assert text.strip()
    assert normalized(shown) == normalized(text)

    shutdown_kernel(lab, state["kernel_id"])
    with lab.client() as client:
        notebook.wait_until(
            lambda: client.get(f"/tasks/{task}").status_code == 404, 60, "the task purged"
        )
        assert client.get(f"/tasks/{task}/events").status_code == 404
    reopen_without_kernel(notebook)
    notebook.wait_until(lambda: status(notebook, 1) != "", 60, "the answer after reload")
    assert status(notebook, 1) == "incomplete"
    assert shown_task_id(notebook, 1) == task
    assert normalized(notebook.message(1)) == normalized(text)
    answer = notebook.answer(1)
    assert answer.locator(".lmsp-stop").is_hidden()
    assert answer.locator(".lmsp-note").is_hidden()  # nothing followed, nothing missing


def test_the_side_panel_lists_a_running_task_and_cancels_it(
    browser: Browser, lab: LiveServer
) -> None:
    name = write_notebook(lab, "panel.ipynb", LOAD, STORY.format(n=400))
    notebook = open_alone(browser, lab, name)
    notebook.run(0)
    notebook.run(1)
    notebook.wait_until(lambda: len(notebook.message(1)) > 20, 120, "some text")
    task = shown_task_id(notebook, 1)
    page = notebook.page
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="lmsp-panel"]').click()
    panel = page.locator("#lmsp-panel")
    panel.wait_for(state="visible")

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
    assert details[1] == f"{model['context_length']:,} ctx"
    notebook.screenshot("side-panel.png")

    cancel.click()
    notebook.wait_until(
        lambda: row.get_attribute("data-status") == "cancelled", 60, "the row cancelled"
    )
    assert str(row.locator(".lmsp-panel-badge").text_content()) == "cancelled"
    assert row.locator(".lmsp-panel-cancel").count() == 0
    assert server_task(lab, task)["status"] == "cancelled"
    assert wait_final(notebook, 1) == "cancelled"


def test_the_status_bar_says_when_the_service_generates(browser: Browser, lab: LiveServer) -> None:
    name = write_notebook(lab, "status.ipynb", LOAD, STORY.format(n=160))
    notebook = open_alone(browser, lab, name)
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

    assert wait_final(notebook, 1) == "incomplete"
    notebook.wait_until(
        lambda: item.get_attribute("data-state") == "idle", 30, "the status bar idle again"
    )
    assert item.inner_text() == f"LMSP: {BUNDLED_MODEL_ID} · idle"
