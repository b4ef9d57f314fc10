"""Inline completions in real JupyterLab: ghost text from the bundled model as you type in a
cell, Tab to take it, Escape to drop it, typing on aborts the request, and the setting that
turns it off. Ghost text is compared with what the server answers the same request, never
with fixed text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Request

from tests.conftest import LiveServer, stop_server
from tests.helpers import eventually
from tests.ui import lab as ui

PROVIDER = "lmsp-jupyter"
GHOST = ".jp-GhostText"
TYPED = "def fibonacci(n):"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """JupyterLab with the extension, logging at DEBUG (the service says when a client left)."""
    server = ui.start_lab(
        tmp_path_factory.mktemp("lab-inline"),
        lab_extension=True,
        config={"ServerApp": {"log_level": "DEBUG"}, "LmspApp": {"log_level": "DEBUG"}},
    )
    yield server
    stop_server(server)


def configure(lab: LiveServer, **settings: Any) -> None:
    """The user's Inline Completer settings for this provider, read by the next page opened."""
    folder = Path(lab.root_dir).parent / "settings" / "@jupyterlab" / "completer-extension"
    folder.mkdir(parents=True, exist_ok=True)
    provider = {"debouncerDelay": 100, "maxTokens": 16, **settings}
    raw = {"providers": {PROVIDER: provider}}
    (folder / "inline-completer.jupyterlab-settings").write_text(json.dumps(raw))


class Completions:
    """The completion requests a page sends, and those it aborted."""

    def __init__(self) -> None:
        self.sent: list[Request] = []
        self.aborted: list[Request] = []

    def aborted_urls(self, notebook: ui.Notebook) -> list[str]:
        """The URLs of the requests aborted so far (the page's events reach Python only while
        it waits on the page: it waits a moment first)."""
        notebook.page.wait_for_timeout(50)
        return [request.url for request in self.aborted]

    def watch(self, notebook: ui.Notebook) -> None:
        def sent(request: Request) -> None:
            if "/lmsp/v1/completions" in request.url:
                self.sent.append(request)

        def failed(request: Request) -> None:
            if "/lmsp/v1/completions" in request.url:
                self.aborted.append(request)

        notebook.page.on("request", sent)
        notebook.page.on("requestfailed", failed)


def open_cell(browser: Browser, lab: LiveServer, name: str) -> tuple[ui.Notebook, Completions]:
    """A notebook of a code cell and an empty one, the cursor in the empty one."""
    ui.write_notebook(lab, name, "import math", "")
    notebook = ui.open_notebook(browser, lab, name)
    completions = Completions()
    completions.watch(notebook)
    notebook.cell(1).locator(".cm-content").click()
    return notebook, completions


#: The text of a ghost text element: its text nodes, a ``<br>`` for each line break.
GHOST_TEXT = """ghost => {
    let text = '';
    const walk = node => node.childNodes.forEach(child => {
        if (child.nodeType === Node.TEXT_NODE) { text += child.textContent; }
        else if (child.nodeName === 'BR') { text += '\\n'; }
        else { walk(child); }
    });
    walk(ghost);
    return text;
}"""


def ghost(notebook: ui.Notebook) -> str:
    """The ghost text shown, or '' when none is: looked up and read in one evaluation, so ghost
    text that goes between a look and a read is not waited for."""
    script = (
        f"() => {{ const shown = document.querySelector('{GHOST}');"
        f" return shown ? ({GHOST_TEXT})(shown) : ''; }}"
    )
    return str(notebook.page.evaluate(script))


def streaming(notebook: ui.Notebook) -> bool:
    """Whether the ghost text is still streaming in."""
    return notebook.page.locator(f"{GHOST}-streamingIndicator").count() > 0


#: The text of a cell's editor: its lines, without the ghost text shown in them.
CELL_TEXT = f"""cell => [...cell.querySelectorAll('.cm-line')].map(line => {{
    const copy = line.cloneNode(true);
    copy.querySelectorAll('{GHOST}, .cm-widgetBuffer').forEach(part => part.remove());
    return copy.textContent;
}}).join('\\n')"""


def cell_text(notebook: ui.Notebook, index: int) -> str:
    """The text of a cell's editor, ghost text left out."""
    return str(notebook.cell(index).evaluate(CELL_TEXT))


def server_text(lab: LiveServer, request: Request) -> str:
    """What the server answers the body of ``request``, not streamed."""
    body = {**json.loads(request.post_data or "{}"), "stream": False}
    with lab.client() as client:
        reply = client.post("/completions", json=body)
        assert reply.status_code == 200, reply.text
        text: str = reply.json()["choices"][0]["text"]
        return text


def type_and_wait_for_ghost(notebook: ui.Notebook) -> str:
    """Type the function's first line and a newline; wait for ghost text; the text."""
    notebook.page.keyboard.type(TYPED)
    notebook.page.keyboard.press("Enter")
    notebook.wait_until(lambda: ghost(notebook).strip(), 120, "ghost text")
    return ghost(notebook)


def test_ghost_text_is_the_servers_completion_and_tab_inserts_it(
    browser: Browser, lab: LiveServer
) -> None:
    configure(lab)
    notebook, completions = open_cell(browser, lab, "inline.ipynb")
    type_and_wait_for_ghost(notebook)
    request = completions.sent[-1]
    body = json.loads(request.post_data or "{}")
    assert body["prompt"].startswith("import math\n\n" + TYPED)
    assert body["stream"] is True
    expected = server_text(lab, request)
    notebook.wait_until(lambda: not streaming(notebook), 240, "the whole suggestion")
    assert ghost(notebook) == expected
    notebook.screenshot("inline-completion.png")
    before = cell_text(notebook, 1)
    notebook.page.keyboard.press("Tab")
    notebook.wait_until(lambda: not ghost(notebook), 30, "the ghost text taken")
    assert cell_text(notebook, 1) == before + expected


def test_escape_dismisses_the_ghost_text(browser: Browser, lab: LiveServer) -> None:
    configure(lab)
    notebook, _ = open_cell(browser, lab, "dismiss.ipynb")
    type_and_wait_for_ghost(notebook)
    before = cell_text(notebook, 1)
    notebook.page.keyboard.press("Escape")
    notebook.wait_until(lambda: not ghost(notebook), 30, "the ghost text gone")
    assert cell_text(notebook, 1) == before


def test_typing_on_aborts_the_request_in_flight(browser: Browser, lab: LiveServer) -> None:
    configure(lab, maxTokens=2000)
    notebook, completions = open_cell(browser, lab, "abort.ipynb")
    log = Path(lab.root_dir).parent / "server.log"
    type_and_wait_for_ghost(notebook)  # its request streams: 2000 tokens take a while
    streaming = completions.sent[-1].url  # unique: ServerConnection adds a timestamp
    left = log.read_text().count("the client left")  # the requests before it left long ago
    notebook.page.keyboard.type("#")
    notebook.wait_until(
        lambda: streaming in completions.aborted_urls(notebook), 30, "the request aborted"
    )
    eventually(
        lambda: log.read_text().count("the client left") > left,
        what="the service seeing the streaming request's client leave",
    )


def test_the_setting_turns_it_off(browser: Browser, lab: LiveServer) -> None:
    configure(lab, enabled=False)
    notebook, completions = open_cell(browser, lab, "off.ipynb")
    notebook.page.keyboard.type(TYPED)
    notebook.page.keyboard.press("Enter")
    notebook.page.keyboard.press("Alt+\\")  # asked for explicitly too
    notebook.page.wait_for_timeout(3000)  # many times the debounce: a request would be out
    assert completions.sent == []
    assert not ghost(notebook)
