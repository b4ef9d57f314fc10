"""An ask in real JupyterLab: streaming, Stop, tool approval and a reload mid-stream.

Each scenario runs twice: with the LMSP lab extension (the MIME renderer shows the answer,
following the task from the browser) and without it (the anywidget view, fed by the kernel).
The screenshots they take are the README's pictures.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.conftest import LiveServer, stop_server
from tests.ui import lab as ui

MODES = ["renderer", "widget"]


@pytest.fixture(scope="module", params=MODES)
def lab(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """JupyterLab with the LMSP lab extension (``renderer``) or without it (``widget``)."""
    server = ui.start_lab(
        tmp_path_factory.mktemp(f"lab-{request.param}"), lab_extension=request.param == "renderer"
    )
    yield server
    stop_server(server)


def mode(lab: LiveServer) -> str:
    """Which view shows answers in this lab."""
    return "renderer" if "lab-renderer" in lab.root_dir else "widget"


def check_view(notebook: ui.Notebook, index: int) -> None:
    """The answer is shown by the view this lab is meant to use."""
    renderer = notebook.cell(index).locator(".lmsp-rendered-task .lmsp-answer").count()
    assert (renderer > 0) == (mode(notebook.lab) == "renderer")
    assert notebook.cell(index).locator(".lmsp-answer").count() == 1


def test_the_answer_streams_into_the_cell(browser: Browser, lab: LiveServer) -> None:
    name = ui.write_notebook(lab, "stream.ipynb", ui.LOAD, ui.EXAMPLES, ui.PATTERN.format(n=48))
    notebook = ui.open_notebook(browser, lab, name)
    for index in (0, 1, 2):
        notebook.run(index)
    notebook.wait_until(lambda: notebook.answer(2).count() > 0, 60, "the answer view")
    answer, growing = notebook.follow(2, 240)
    assert notebook.status(2) == "incomplete"  # 48 tokens of more rows: cut by max tokens
    assert len(growing) >= 2, f"fewer than two partial states before the final one: {growing}"
    # Each partial state is the start of the final text (its last word may still be growing).
    for text in growing:
        head = ui.normalized(text).rsplit(" ", 1)[0]
        assert ui.normalized(answer).startswith(head), (text, answer)
    check_view(notebook, 2)
    assert ui.normalized(answer) == ui.normalized(ui.server_text(lab, notebook.task_id(2)))
    notebook.screenshot(f"ask-{mode(lab)}.png")


def test_a_question_may_end_with_a_question_mark(browser: Browser, lab: LiveServer) -> None:
    question = "What is the capital of France?"
    ask = f"answer = %lmsp ask --max-tokens 12 --temperature 0 {question}"
    name = ui.write_notebook(lab, "question.ipynb", ui.LOAD, ask, "print(answer.wait().prompt)")
    notebook = ui.open_notebook(browser, lab, name)
    notebook.run(0)
    notebook.run(1)
    assert notebook.wait_final(1) in ("completed", "incomplete")
    check_view(notebook, 1)
    assert notebook.message(1).strip()
    notebook.wait_idle()
    notebook.run(2)
    notebook.wait_until(lambda: question in notebook.output_text(2), 60, "the prompt printed")
    assert notebook.output_text(2).strip() == question


def test_stop_cancels_the_task_and_frees_the_model(browser: Browser, lab: LiveServer) -> None:
    name = ui.write_notebook(
        lab, "stop.ipynb", ui.LOAD, ui.STORY.format(n=400), ui.STORY.format(n=6)
    )
    notebook = ui.open_notebook(browser, lab, name)
    notebook.stream()
    notebook.cell(1).locator(".lmsp-stop").first.click()
    assert notebook.wait_final(1) == "cancelled"
    with lab.client() as client:
        assert client.get(f"/tasks/{notebook.task_id(1)}").json()["status"] == "cancelled"
    notebook.run(2)
    assert notebook.wait_final(2) == "incomplete"
    assert notebook.message(2).strip()


def test_a_tool_call_runs_after_approve(browser: Browser, lab: LiveServer) -> None:
    name = ui.write_notebook(
        lab, "tools.ipynb", ui.LOAD, ui.WEATHER_TOOL, ui.ASK_WEATHER, "print(calls)"
    )
    notebook = ui.open_notebook(browser, lab, name)
    for index in (0, 1, 2):
        notebook.run(index)
    approve = notebook.wait_approve(2, 120)
    assert notebook.status(2) == "requires_action"
    notebook.screenshot(f"approve-{mode(lab)}.png")
    approve.first.click()
    assert notebook.wait_final(2) in ("completed", "incomplete")
    card = notebook.cell(2).locator(".lmsp-call").first
    assert card.get_attribute("data-decision") == "approved"
    assert "sunny" in card.inner_text()
    (city,) = re.findall(r"'([^']*)'", notebook.printed_calls(3))
    assert city
    assert city in card.inner_text()


def test_a_reload_mid_stream_continues_without_duplicates(
    browser: Browser, lab: LiveServer
) -> None:
    notebook = ui.open_story(browser, lab, "reload.ipynb", 160)
    task = notebook.stream()
    notebook.save()
    ui.reopen(notebook)
    notebook.wait_until(lambda: notebook.answer(1).count() > 0, 60, "the answer after reload")
    with lab.client() as client:
        status_at_reload = client.get(f"/tasks/{task}").json()["status"]
    assert notebook.wait_final(1) == "incomplete"
    assert notebook.task_id(1) == task
    check_view(notebook, 1)
    assert ui.normalized(notebook.message(1)) == ui.normalized(ui.server_text(lab, task))
    print(f"\nthe task was {status_at_reload} at the reload")


def test_the_probabilities_toggle_shades_each_token(browser: Browser, lab: LiveServer) -> None:
    ask = "%lmsp ask --max-tokens 16 --temperature 0 --logprobs 3 The capital of France is"
    notebook = ui.open_notebook(browser, lab, ui.write_notebook(lab, "shade.ipynb", ui.LOAD, ask))
    notebook.run(0)
    notebook.run(1)
    assert notebook.wait_final(1) in ("completed", "incomplete")
    text = notebook.message(1)
    toggle = notebook.cell(1).locator(".lmsp-shade")
    assert toggle.is_visible()
    toggle.click()
    tokens = notebook.cell(1).locator(".lmsp-token")
    notebook.wait_until(lambda: tokens.count() > 0, 30, "the shaded tokens")
    shown = tokens.all_text_contents()
    result = ui.server_task(lab, notebook.task_id(1))["result"]
    assert "".join(shown) == ui.server_text(lab, notebook.task_id(1))
    assert len(shown) == result["usage"]["output_tokens"]
    titles = [tokens.nth(i).get_attribute("title") or "" for i in range(tokens.count())]
    assert all("%" in title for title in titles)
    check_view(notebook, 1)
    tokens.first.hover()
    notebook.screenshot(f"shading-{mode(lab)}.png")
    toggle.click()
    notebook.wait_until(lambda: tokens.count() == 0, 30, "the text again")
    assert ui.normalized(notebook.message(1)) == ui.normalized(text)
