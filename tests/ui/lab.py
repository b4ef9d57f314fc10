"""Real JupyterLab for the UI tests: a ``jupyter lab`` server, notebooks, and page helpers.

The server runs the LMSP extension and the bundled model; its kernels find the service through
the environment the extension exports. ``lab_extension=False`` disables the LMSP lab extension
(the JupyterLab page config), so an ask shows the anywidget view instead of the MIME renderer.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from playwright.sync_api import Browser, Page

from tests.conftest import LiveServer, start_server

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
FINAL_STATUSES = ("completed", "incomplete", "failed", "cancelled")


def start_lab(tmp: Path, *, lab_extension: bool) -> LiveServer:
    """``jupyter lab`` on a loopback port with a clean workspace and settings."""
    if not lab_extension:
        labconfig = tmp / "config" / "labconfig"
        labconfig.mkdir(parents=True, exist_ok=True)
        page_config = {"disabledExtensions": {"lmsp-jupyter": True}}
        (labconfig / "page_config.json").write_text(json.dumps(page_config))
    # No news toast over the notebook: it would cover what the tests look at.
    notification = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True, exist_ok=True)
    (notification / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    return start_server(
        tmp,
        f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        f"--LabApp.user_settings_dir={tmp / 'settings'}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        app="lab",
        base_url="/",
    )


def write_notebook(lab: LiveServer, name: str, *cells: str) -> str:
    """A notebook of code cells in the server's root; returns its path for ``lab/tree``."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(notebook, Path(lab.root_dir) / name)
    return name


@dataclass
class Notebook:
    """A notebook open in JupyterLab in a browser page."""

    page: Page
    lab: LiveServer
    name: str

    def cell(self, index: int) -> Any:
        """The ``index``-th cell of the notebook."""
        return self.page.locator(".jp-Notebook .jp-Cell").nth(index)

    def run(self, index: int) -> None:
        """Run one cell as a user would (select it, Shift+Enter); wait until it is queued."""
        cell = self.cell(index)
        prompt = cell.locator(".jp-InputArea-prompt")
        before = prompt.inner_text()
        prompt.click()
        self.page.keyboard.press("Shift+Enter")
        self.wait_until(
            lambda: prompt.inner_text() != before and re.search(r"[*0-9]", prompt.inner_text()),
            30,
            f"cell {index} to be queued",
        )

    def wait_idle(self, timeout: float = 120) -> None:
        """Wait until the kernel is idle (the toolbar's execution indicator says so)."""
        self.page.wait_for_selector(
            '.jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=timeout * 1000
        )

    def output_text(self, index: int) -> str:
        """The text of a cell's outputs."""
        return str(self.cell(index).locator(".jp-OutputArea").inner_text())

    def answer(self, index: int) -> Any:
        """The answer view in a cell's outputs (widget or MIME renderer)."""
        return self.cell(index).locator(".lmsp-answer").first

    def status(self, index: int) -> str:
        """The status word the answer shows, or '' while it is not there."""
        status = self.cell(index).locator(".lmsp-answer .lmsp-status")
        return str(status.first.inner_text()).strip() if status.count() else ""

    def message(self, index: int) -> str:
        """The message text the answer shows so far."""
        messages = self.cell(index).locator(".lmsp-answer .lmsp-message")
        return "".join(str(m.inner_text()) for m in messages.all())

    def wait_until(self, check: Callable[[], object], timeout: float, what: str) -> None:
        """Poll ``check`` until true, or fail saying ``what``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.05)
        raise AssertionError(f"{what}: not after {timeout} s")

    def wait_final(self, index: int, timeout: float = 240) -> str:
        """Wait for the answer in cell ``index`` to reach a final status; return it."""
        self.wait_until(
            lambda: self.status(index) in FINAL_STATUSES, timeout, f"a final status in {index}"
        )
        return self.status(index)

    def save(self) -> None:
        """Save the notebook (Ctrl+S) and wait until it is saved."""
        self.page.keyboard.press("Control+s")
        self.page.wait_for_selector(".lm-TabBar-tab.jp-mod-dirty", state="detached")

    def screenshot(self, name: str) -> Path:
        """Save a screenshot of the page under docs/images/ (shown in the README)."""
        IMAGES.mkdir(parents=True, exist_ok=True)
        path = IMAGES / name
        self.page.screenshot(path=str(path))
        return path


def open_notebook(browser: Browser, lab: LiveServer, name: str) -> Notebook:
    """Log in with the token and open ``name`` in JupyterLab, its kernel idle."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto(f"{lab.root}lab/tree/{name}?token={lab.token}")
    notebook = Notebook(page, lab, name)
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    notebook.wait_idle()
    return notebook


def reopen(notebook: Notebook) -> None:
    """Reload the page, as a user pressing F5, and wait for the notebook again."""
    notebook.page.reload()
    notebook.page.wait_for_selector(".jp-Notebook .jp-Cell")
    notebook.wait_idle()
