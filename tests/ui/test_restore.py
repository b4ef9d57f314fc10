"""An answer is never lost from its cell: reopened without saving, the notebook gets it back.

Nothing here saves before a reload. The kernel records in each ask's task where it came from
(notebook, cell, source, kernel, ask); when a notebook opens, the lab extension lists that
notebook's tasks and puts the newest answer of each cell back where it is missing: live while
its task runs, final after. Cleared answers stay cleared.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from playwright.sync_api import Browser

from tests.conftest import LiveServer, stop_server
from tests.helpers import message_text
from tests.ui import lab as ui


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """JupyterLab with the LMSP lab extension, and without autosave: nothing is saved unasked."""
    tmp = tmp_path_factory.mktemp("lab-restore")
    server = ui.start_lab(tmp, lab_extension=True)
    docmanager = tmp / "settings" / "@jupyterlab" / "docmanager-extension"
    docmanager.mkdir(parents=True)
    (docmanager / "plugin.jupyterlab-settings").write_text('{"autosave": false}')
    yield server
    stop_server(server)


def opened(browser: Browser, lab: LiveServer, name: str) -> ui.Notebook:
    """The notebook open in a new browser context; leaving it unsaved is accepted."""
    notebook = ui.open_notebook(browser, lab, name)
    notebook.page.on("dialog", lambda dialog: dialog.accept())  # "leave with unsaved changes?"
    return notebook


def streaming_story(
    browser: Browser, lab: LiveServer, name: str, tokens: int
) -> tuple[ui.Notebook, str, str]:
    """``name``, a new notebook asking for a story of ``tokens`` tokens, open and its answer
    streaming: the notebook, the answer's task and the kernel that asked."""
    ui.write_notebook(lab, name, ui.LOAD, ui.STORY.format(n=tokens))
    notebook = opened(browser, lab, name)
    task = notebook.stream()
    (kernel,) = ui.running_kernels(lab)
    return notebook, task, kernel


def reload_unsaved(notebook: ui.Notebook) -> None:
    """Reload the page (F5) without saving, and wait until the extension has looked for tasks."""
    notebook.page.reload()
    wait_restored(notebook)


def wait_restored(notebook: ui.Notebook) -> int:
    """Wait for the extension's look-up of the notebook's tasks; how many answers came back."""
    panel = notebook.page.locator(".jp-NotebookPanel[data-lmsp-restored]")
    notebook.wait_until(lambda: panel.count() > 0, 120, "the look-up of the notebook's tasks")
    restored = str(panel.first.get_attribute("data-lmsp-restored"))
    assert restored.isdigit(), restored
    return int(restored)


def cell_ids(lab: LiveServer, name: str) -> list[str]:
    """The ids of the notebook's cells, as written on disk."""
    notebook = nbformat.read(Path(lab.root_dir) / name, as_version=4)
    return [cell["id"] for cell in notebook.cells]


def dirty(notebook: ui.Notebook) -> bool:
    return notebook.page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count() > 0


def notebook_tasks(lab: LiveServer, name: str) -> list[dict[str, Any]]:
    with lab.client() as client:
        reply = client.get("/tasks", params={"metadata.notebook": name, "limit": 100})
        assert reply.status_code == 200, reply.text
        tasks: list[dict[str, Any]] = reply.json()["data"]
        return tasks


@pytest.mark.timeout(1200)  # a busy machine generates slowly
def test_a_reload_mid_stream_without_saving_brings_the_answer_back_live(
    browser: Browser, lab: LiveServer
) -> None:
    notebook, task, kernel = streaming_story(browser, lab, "unsaved-reload.ipynb", 600)
    name = notebook.name
    (listed,) = notebook_tasks(lab, name)
    assert listed["id"] == task
    metadata = listed["metadata"]
    assert set(metadata) == {"notebook", "cell", "source_hash", "kernel", "ask"}
    assert (metadata["notebook"], metadata["cell"], metadata["kernel"]) == (
        name,
        cell_ids(lab, name)[1],
        kernel,
    )
    assert metadata["ask"].startswith("ask_")
    assert not saved_outputs(lab, name)  # the file on disk never had the answer

    reload_unsaved(notebook)
    answer = notebook.answer(1)
    notebook.wait_until(lambda: answer.count() > 0, 30, "the answer back in its cell")
    assert notebook.task_id(1) == task
    seen = notebook.growing_texts(1, 600, "the restored answer to stream")
    assert len(seen) >= 3, f"the restored answer was not seen streaming: {seen}"
    notebook.screenshot("restored-answer.png")
    # enough seen: the rest of a long story is not needed; the restored answer's Stop works
    notebook.cell(1).locator(".lmsp-stop").first.click()
    status = notebook.wait_final(1)
    assert status == ui.server_task(lab, task)["status"] == "cancelled"
    final = ui.normalized(notebook.message(1))
    for text in seen:
        assert final.startswith(ui.normalized(text)[:-1])
    # the server's text exactly: nothing replayed twice, nothing missing, one answer only
    assert final == ui.normalized(ui.server_text(lab, task))
    assert notebook.cell(1).locator(".lmsp-answer").count() == 1
    assert notebook.cell(1).locator(".jp-OutputArea-output").count() == 1
    assert dirty(notebook)  # changed since it was read: a save keeps the answer


def saved_outputs(lab: LiveServer, name: str) -> list[Any]:
    """Every output of every cell of the notebook's file."""
    notebook = nbformat.read(Path(lab.root_dir) / name, as_version=4)
    return [output for cell in notebook.cells for output in cell.get("outputs", [])]


@pytest.mark.timeout(1200)
def test_a_tab_closed_mid_stream_reopens_with_the_final_answer_after_a_kernel_restart(
    browser: Browser, lab: LiveServer
) -> None:
    notebook, task, kernel = streaming_story(browser, lab, "closed-tab.ipynb", 60)
    notebook.page.context.close()
    with ui.jupyter_api(lab) as api:  # the kernel that asked forgets the ask
        assert api.post(f"/kernels/{kernel}/restart").status_code == 200
    with lab.client() as client:
        notebook.wait_until(
            lambda: client.get(f"/tasks/{task}").json()["status"] in ui.FINAL_STATUSES,
            900,
            "the task to finish",
        )

    # its kernel is shut down first: a new one starts
    notebook = opened(browser, lab, notebook.name)
    assert wait_restored(notebook) == 1
    assert notebook.task_id(1) == task
    assert notebook.status(1) == ui.server_task(lab, task)["status"]
    assert ui.normalized(notebook.message(1)) == ui.normalized(ui.server_text(lab, task))
    assert notebook.cell(1).locator(".lmsp-stop").is_hidden()
    assert dirty(notebook)
    notebook.save()
    state = ui.saved_answer(lab, notebook.name, 1)
    assert [round_["task_id"] for round_ in state["rounds"]] == [task]
    assert message_text(state["rounds"][0]["response"]) == ui.server_text(lab, task)


def test_cleared_outputs_stay_cleared_after_a_reload(browser: Browser, lab: LiveServer) -> None:
    name = ui.write_notebook(
        lab, "cleared.ipynb", ui.LOAD, "answer = " + ui.STORY.format(n=16), "answer.wait();"
    )
    notebook = opened(browser, lab, name)
    for index in (0, 1, 2):
        notebook.run(index)
    notebook.wait_final(1)
    notebook.wait_idle()  # answer.wait() has returned: the kernel's last update is shown
    page = notebook.page
    page.locator(".lm-MenuBar-item", has_text="Edit").click()
    page.locator('.lm-Menu-item[data-command="editmenu:clear-all"]').click()
    notebook.wait_until(lambda: notebook.answer(1).count() == 0, 30, "the outputs cleared")
    reload_unsaved(notebook)
    assert wait_restored(notebook) == 0
    assert notebook.cell(1).locator(".jp-OutputArea-output").count() == 0


def test_two_asks_in_two_cells_come_back_each_to_its_own_cell_with_no_kernel(
    browser: Browser, lab: LiveServer
) -> None:
    other = "%lmsp ask --max-tokens 24 --temperature 0 The capital of France is"
    name = ui.write_notebook(lab, "two-cells.ipynb", ui.LOAD, ui.STORY.format(n=24), other)
    notebook = opened(browser, lab, name)
    for index in (0, 1, 2):
        notebook.run(index)
    notebook.wait_final(1)
    notebook.wait_final(2)
    tasks = {index: notebook.task_id(index) for index in (1, 2)}
    assert tasks[1] != tasks[2]

    (kernel,) = ui.running_kernels(lab)
    ui.shutdown_kernel(lab, kernel)  # nothing in the kernel helps: the front end restores
    ui.reopen_without_kernel(notebook)
    assert wait_restored(notebook) == 2
    assert ui.running_kernels(lab) == []
    for index, task in tasks.items():
        assert notebook.task_id(index) == task
        assert notebook.status(index) == ui.server_task(lab, task)["status"]
        assert ui.normalized(notebook.message(index)) == ui.normalized(ui.server_text(lab, task))
        assert notebook.cell(index).locator(".lmsp-answer").count() == 1
    assert notebook.cell(0).locator(".jp-OutputArea-output").count() == 0


@pytest.mark.timeout(1200)
def test_a_reload_while_a_call_waits_for_approval_brings_the_approval_back(
    browser: Browser, lab: LiveServer
) -> None:
    name = ui.write_notebook(
        lab, "approval.ipynb", ui.LOAD, ui.WEATHER_TOOL, ui.ASK_WEATHER, "print(calls)"
    )
    notebook = opened(browser, lab, name)
    for index in (0, 1, 2):
        notebook.run(index)
    approve = notebook.wait_approve(2, 300)
    (first,) = notebook_tasks(lab, name)

    reload_unsaved(notebook)
    notebook.wait_until(lambda: approve.count() > 0, 30, "the approval back in its cell")
    assert approve.first.is_enabled()  # its kernel still runs: the click can reach it
    assert notebook.status(2) == "requires_action"
    assert notebook.task_id(2) == first["id"]
    card = notebook.cell(2).locator(".lmsp-call").first
    assert card.get_attribute("data-decision") == "pending"
    assert "weather" in card.inner_text()
    notebook.screenshot("restored-approval.png")

    approve.first.click()  # the kernel runs the tool and asks again; the cell follows
    status = notebook.wait_final(2, 600)
    second, earlier = notebook_tasks(lab, name)
    assert earlier["id"] == first["id"]
    assert second["metadata"]["ask"] == first["metadata"]["ask"]
    assert status == ui.server_task(lab, second["id"])["status"]
    assert card.get_attribute("data-decision") == "approved"
    assert ui.normalized(notebook.message(2)) == ui.normalized(ui.server_text(lab, second["id"]))
    assert notebook.cell(2).locator(".lmsp-answer").count() == 1
    assert notebook.printed_calls(3).count("'") == 2  # the tool ran once, after the one click
