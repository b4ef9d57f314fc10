"""Cell actions in real JupyterLab: an error output's "Explain" button runs ``%lmsp explain`` in
a new cell below; "Edit cell with LMSP…" streams the cell's new source from the bundled model as
a diff, Accept puts it in the cell (one Ctrl+Z brings the old source back), Reject changes
nothing. The new source is compared with what the server answers the same request, never with
fixed text."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from playwright.sync_api import Browser, Request

from tests.conftest import LiveServer, stop_server
from tests.ui import lab as ui
from tests.ui.test_inline_completions import server_text as completion_text

EDIT_COMMAND = "lmsp-jupyter:edit-cell"
CONTRACT = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "edit_prompt.json").read_text()
)
#: The contract's first case: the cell's source and the instruction typed, and the prompt sent.
#: The source ends with a newline, which the prompt leaves out: even a model that copies the
#: code writes a new source other than the old one, so that undo has something to restore.
CASE = CONTRACT["cases"][0]
SOURCE = CASE["source"]
CELLS = ".jp-NotebookPanel:visible .jp-Cell"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """JupyterLab with the extension and the bundled model, inline completions off (their
    ghost text and requests would mix with the edit's)."""
    tmp = tmp_path_factory.mktemp("lab-cells")
    folder = tmp / "settings" / "@jupyterlab" / "completer-extension"
    folder.mkdir(parents=True)
    off = {"providers": {"lmsp-jupyter": {"enabled": False}}}
    (folder / "inline-completer.jupyterlab-settings").write_text(json.dumps(off))
    server = ui.start_lab(tmp, lab_extension=True)
    yield server
    stop_server(server)


def cell_text(notebook: ui.Notebook, index: int) -> str:
    """The text of a cell's editor: its lines' text content (an empty line holds a ``<br>``)."""
    script = "cell => [...cell.querySelectorAll('.cm-line')].map(l => l.textContent).join('\\n')"
    return str(notebook.cell(index).evaluate(script))


def executed(notebook: ui.Notebook, index: int) -> bool:
    """Whether cell ``index`` shows an execution count and some output."""
    prompt = notebook.cell(index).locator(".jp-InputArea-prompt").inner_text()
    outputs = notebook.cell(index).locator(".jp-OutputArea-output").count()
    return re.search(r"\[\d+\]", prompt) is not None and outputs > 0


def test_explain_is_offered_on_error_outputs_and_runs_in_a_new_cell_below(
    browser: Browser, lab: LiveServer
) -> None:
    ui.write_notebook(lab, "explain.ipynb", f"{ui.LOAD}\n1 + 1", "1 / 0", "2 + 2")
    notebook = ui.open_notebook(browser, lab, "explain.ipynb")
    notebook.run(0)
    notebook.wait_until(lambda: executed(notebook, 0), 60, "cell 0 run")
    notebook.run(1)
    notebook.wait_until(
        lambda: "ZeroDivisionError" in notebook.output_text(1), 60, "the error output"
    )
    explain = notebook.page.locator(".lmsp-ExplainButton")
    notebook.wait_until(lambda: explain.count() == 1, 30, "an Explain button")
    assert notebook.cell(0).locator(".lmsp-ExplainButton").count() == 0
    assert notebook.cell(1).locator(".lmsp-ExplainButton").count() == 1

    cells = notebook.page.locator(CELLS)
    assert cells.count() == 3
    explain.click()
    notebook.wait_until(lambda: cells.count() == 4, 30, "a cell inserted below")
    assert [cell_text(notebook, i) for i in range(4)] == [
        f"{ui.LOAD}\n1 + 1",
        "1 / 0",
        "%lmsp explain",
        "2 + 2",
    ]
    # The new cell asks the model about the error: its answer's prompt, shown from the start,
    # holds the traceback and the failing cell's source. The answer itself is not waited for.
    prompt = notebook.answer(2).locator(".lmsp-prompt")
    notebook.wait_until(lambda: prompt.count() == 1 and prompt.is_visible(), 120, "the prompt")
    prompt.locator("summary").click()
    shown = str(prompt.inner_text())
    assert "ZeroDivisionError" in shown and "1 / 0" in shown
    notebook.screenshot("explain-error.png")
    stop = notebook.answer(2).locator(".lmsp-stop")
    if stop.is_visible():
        stop.click()
    assert cells.count() == 4
    assert not executed(notebook, 3)


def open_edit(browser: Browser, lab: LiveServer, name: str) -> tuple[ui.Notebook, list[Request]]:
    """A notebook of one cell (``SOURCE``), the cursor in it; the edit requests it sends."""
    ui.write_notebook(lab, name, SOURCE)
    notebook = ui.open_notebook(browser, lab, name)
    sent: list[Request] = []

    def watch(request: Request) -> None:
        if "/lmsp/v1/completions" in request.url:
            sent.append(request)

    notebook.page.on("request", watch)
    notebook.cell(0).locator(".cm-content").click()
    return notebook, sent


def instruct(notebook: ui.Notebook) -> Any:
    """Type the instruction in the dialog, send it, wait until the edit streamed; the diff."""
    dialog = notebook.page.locator(".jp-Dialog")
    dialog.locator("input").fill(CASE["instruction"])
    dialog.get_by_role("button", name="OK").click()
    diff = notebook.cell(0).locator(".lmsp-EditDiff")
    notebook.wait_until(
        lambda: notebook.cell(0).locator(".lmsp-EditDiff.lmsp-mod-done").count() == 1,
        240,
        "the edit streamed",
    )
    return diff


def server_source(lab: LiveServer, request: Request) -> str:
    """The new source in what the server answers the body of ``request``, not streamed."""
    return completion_text(lab, request).removesuffix("\n")


def diff_sides(diff: Any) -> tuple[str, str]:
    """The old and the new source a diff view shows (its kept and removed lines, its kept and
    added lines)."""
    rows = diff.locator(".lmsp-EditDiff-lines > div")
    kinds = [str(row.get_attribute("class")) for row in rows.all()]
    texts = [text[2:] for text in rows.all_inner_texts()]
    old = [t for k, t in zip(kinds, texts, strict=True) if not k.endswith("added")]
    new = [t for k, t in zip(kinds, texts, strict=True) if not k.endswith("removed")]
    return "\n".join(old), "\n".join(new)


def test_edit_cell_streams_a_diff_accept_replaces_the_source_and_ctrl_z_restores_it(
    browser: Browser, lab: LiveServer
) -> None:
    notebook, sent = open_edit(browser, lab, "edit.ipynb")
    button = notebook.cell(0).locator(f'.jp-cell-toolbar [data-command="{EDIT_COMMAND}"]')
    button.click()
    diff = instruct(notebook)
    assert len(sent) == 1
    body = json.loads(sent[0].post_data or "{}")
    assert body["prompt"] == CASE["prompt"]
    assert body["stop"] == CONTRACT["stop"]
    assert body["stream"] is True
    expected = server_source(lab, sent[0])
    assert expected != SOURCE
    assert diff_sides(diff) == (SOURCE, expected)
    notebook.screenshot("edit-cell.png")

    diff.locator(".lmsp-EditDiff-accept").click()
    notebook.wait_until(lambda: diff.count() == 0, 30, "the diff closed")
    assert cell_text(notebook, 0) == expected
    notebook.cell(0).locator(".cm-content").click()
    notebook.page.keyboard.press("Control+z")
    notebook.wait_until(lambda: cell_text(notebook, 0) == SOURCE, 30, "the old source back")


def test_reject_from_the_command_palette_leaves_the_cell_untouched(
    browser: Browser, lab: LiveServer
) -> None:
    notebook, sent = open_edit(browser, lab, "reject.ipynb")
    dirty = notebook.page.locator(".lm-TabBar-tab.jp-mod-dirty")
    dirty_before = dirty.count()
    notebook.page.keyboard.press("Escape")  # command mode: the palette's shortcut is taken
    notebook.page.keyboard.press("Control+Shift+c")
    notebook.page.locator(".lm-CommandPalette-input").fill("Edit cell with LMSP")
    notebook.page.locator(f'.lm-CommandPalette-item[data-command="{EDIT_COMMAND}"]').first.click()
    diff = instruct(notebook)
    assert len(sent) == 1
    diff.locator(".lmsp-EditDiff-reject").click()
    notebook.wait_until(lambda: diff.count() == 0, 30, "the diff closed")
    assert cell_text(notebook, 0) == SOURCE
    assert dirty.count() == dirty_before


def test_escape_while_streaming_aborts_the_request_and_changes_nothing(
    browser: Browser, lab: LiveServer
) -> None:
    long_source = "".join(f"value_{i} = {i} * {i}\n" for i in range(150))
    ui.write_notebook(lab, "escape.ipynb", long_source)
    notebook = ui.open_notebook(browser, lab, "escape.ipynb")
    aborted: list[str] = []
    notebook.page.on(
        "requestfailed",
        lambda request: aborted.append(request.url) if "/completions" in request.url else None,
    )
    notebook.cell(0).locator(".cm-content").click()
    notebook.page.keyboard.press("Escape")
    notebook.page.keyboard.press("Control+Shift+c")
    notebook.page.locator(".lm-CommandPalette-input").fill("Edit cell with LMSP")
    notebook.page.locator(f'.lm-CommandPalette-item[data-command="{EDIT_COMMAND}"]').first.click()
    dialog = notebook.page.locator(".jp-Dialog")
    dialog.locator("input").fill("square with ** instead")
    dialog.get_by_role("button", name="OK").click()
    diff = notebook.cell(0).locator(".lmsp-EditDiff")
    # a few lines of the new source in: the copy of 150 lines is far from done
    notebook.wait_until(
        lambda: diff.locator(".lmsp-EditDiff-same, .lmsp-EditDiff-added").count() > 3,
        240,
        "the edit streaming",
    )
    assert diff.locator(".lmsp-EditDiff-accept").is_disabled()
    notebook.page.keyboard.press("Escape")
    notebook.wait_until(lambda: diff.count() == 0, 30, "the diff closed")

    def seen_aborted() -> bool:
        notebook.page.wait_for_timeout(50)  # the page's events reach Python while it waits
        return bool(aborted)

    notebook.wait_until(seen_aborted, 30, "the request aborted")
    # the editor renders only the lines in view: the saved notebook has the whole source
    notebook.cell(0).locator(".cm-content").click()
    notebook.page.keyboard.press("Escape")
    notebook.page.keyboard.press("Control+s")
    notebook.wait_until(
        lambda: notebook.page.locator(".lm-TabBar-tab.jp-mod-dirty").count() == 0, 30, "saved"
    )
    saved = nbformat.read(Path(lab.root_dir) / "escape.ipynb", as_version=4)
    assert saved.cells[0].source == long_source
