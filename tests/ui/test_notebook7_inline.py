"""Inline completions in Notebook 7 (``jupyter notebook``, the same lab extension system as
JupyterLab): ghost text from the bundled model in a cell of a notebook opened at
``/notebooks/<name>.ipynb`` is what the server answers the same request, and Tab inserts it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.conftest import LiveServer, stop_server
from tests.ui import lab as ui
from tests.ui.test_inline_completions import (
    TYPED,
    Completions,
    cell_text,
    configure,
    ghost,
    server_text,
    streaming,
    type_and_wait_for_ghost,
)


@pytest.fixture(scope="module")
def notebook_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """``jupyter notebook`` with the extension."""
    server = ui.start_lab(tmp_path_factory.mktemp("notebook7"), lab_extension=True, app="notebook")
    yield server
    stop_server(server)


def open_in_notebook7(browser: Browser, server: LiveServer, name: str) -> ui.Notebook:
    """``name`` opened in Notebook 7 (``/notebooks/<name>``), its kernel running."""
    for kernel_id in ui.running_kernels(server):
        ui.shutdown_kernel(server, kernel_id)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto(f"{server.root}notebooks/{name}?token={server.token}")
    notebook = ui.Notebook(page, server, name)
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    ui.wait_kernel(notebook)
    return notebook


def test_ghost_text_in_notebook7_is_the_servers_completion_and_tab_inserts_it(
    browser: Browser, notebook_server: LiveServer
) -> None:
    configure(notebook_server)
    name = ui.write_notebook(notebook_server, "notebook7.ipynb", "import math", "")
    notebook = open_in_notebook7(browser, notebook_server, name)
    completions = Completions()
    completions.watch(notebook)
    notebook.cell(1).locator(".cm-content").click()
    type_and_wait_for_ghost(notebook)
    request = completions.sent[-1]
    body = json.loads(request.post_data or "{}")
    assert body["prompt"].startswith("import math\n\n" + TYPED)
    expected = server_text(notebook_server, request)
    notebook.wait_until(lambda: not streaming(notebook), 240, "the whole suggestion")
    assert ghost(notebook) == expected
    before = cell_text(notebook, 1)
    notebook.page.keyboard.press("Tab")
    notebook.wait_until(lambda: not ghost(notebook), 30, "the ghost text taken")
    assert cell_text(notebook, 1) == before + expected
