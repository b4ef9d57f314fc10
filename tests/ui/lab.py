"""Real JupyterLab for the UI tests: a ``jupyter lab`` server, notebooks, and page helpers.

The server runs the LMSP extension and the bundled model; its kernels find the service through
the environment the extension exports. ``lab_extension=False`` disables the LMSP lab extension
(the JupyterLab page config), so an ask shows the anywidget view instead of the MIME renderer.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import nbformat
from playwright.sync_api import Browser, Page
from playwright.sync_api import Error as PlaywrightError

from tests.conftest import LiveServer, start_server
from tests.helpers import eventually, message_text

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
FINAL_STATUSES = ("completed", "incomplete", "failed", "cancelled")
#: The first cell of every UI test notebook.
LOAD = "%load_ext lmsp_jupyter"
#: A greedy story ask of ``n`` tokens: long enough to watch, cut by max_output_tokens.
STORY = "%lmsp ask --max-tokens {n} --temperature 0 Once upon a time, in a small village,"
#: A few-shot pattern for the model to continue, and a greedy ask of ``n`` tokens that
#: continues it (long enough to watch, cut by max_output_tokens).
EXAMPLES = (
    'examples = """Country: France -> Capital: Paris\n'
    "Country: Japan -> Capital: Tokyo\n"
    'Country: Italy -> Capital: Rome"""'
)
PATTERN = "answer = %lmsp ask --max-tokens {n} --temperature 0 {{examples}}"
#: A cell defining the tool ``weather`` (it records each city in ``calls``), and an ask that
#: makes the model call it; ``print(calls)`` then shows the calls the tool ran.
WEATHER_TOOL = (
    "import lmsp_jupyter\n"
    "calls = []\n\n"
    "@lmsp_jupyter.tool\n"
    "def weather(city: str) -> str:\n"
    '    """The weather in a city."""\n'
    "    calls.append(city)\n"
    '    return "sunny"'
)
ASK_WEATHER = (
    "%lmsp ask --tools weather --tool-choice weather --max-tokens 24 --temperature 0 "
    "The weather in Paris:"
)


def start_lab(
    tmp: Path,
    *,
    lab_extension: bool,
    config: dict[str, object] | None = None,
    app: Literal["lab", "notebook"] = "lab",
) -> LiveServer:
    """``jupyter lab`` (or ``jupyter notebook``, Notebook 7, which loads the same lab
    extensions) on a loopback port with a clean workspace and settings (:func:`lab_arguments`).

    ``config`` is the server's ``jupyter_server_config.json`` (e.g. ``{"LmspApp": {...}}``).
    """
    if not lab_extension:
        labconfig = tmp / "config" / "labconfig"
        labconfig.mkdir(parents=True, exist_ok=True)
        page_config = {"disabledExtensions": {"lmsp-jupyter": True}}
        (labconfig / "page_config.json").write_text(json.dumps(page_config))
    return start_server(tmp, *lab_arguments(tmp, app), app=app, base_url="/", config=config)


def lab_arguments(tmp: Path, app: Literal["lab", "notebook"] = "lab") -> list[str]:
    """The command-line settings of a JupyterLab (or Notebook 7) server for the UI tests, its
    workspace and settings under ``tmp``: no news toast over the notebook (it would cover what
    the tests look at), and the lab extension built in the package under test
    (``lmsp_jupyter/labextension`` beside these tests), found ahead of any copy an install put
    in the environment."""
    notification = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True, exist_ok=True)
    (notification / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    labextensions = tmp / "labextensions"
    labextensions.mkdir(exist_ok=True)
    built = ROOT / "lmsp_jupyter" / "labextension"
    assert (built / "package.json").exists(), f"the lab extension is not built: {built}"
    (labextensions / "lmsp-jupyter").symlink_to(built, target_is_directory=True)
    settings = "LabApp" if app == "lab" else "JupyterNotebookApp"
    return [
        f"--{settings}.extra_labextensions_path={labextensions}",
        f"--{settings}.workspaces_dir={tmp / 'workspaces'}",
        f"--{settings}.user_settings_dir={tmp / 'settings'}",
        *(
            ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
            if app == "lab"
            else []
        ),
    ]


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
        return self.page.locator(".jp-NotebookPanel:visible .jp-Cell").nth(index)

    def run(self, index: int) -> None:
        """Run one cell as a user would (select it, Shift+Enter); wait until it is queued.

        Right after a notebook opens, JupyterLab may take the key before its kernel
        connection is ready and only move the selection; the key is then pressed again.
        """
        prompt = self.cell(index).locator(".jp-InputArea-prompt")
        before = prompt.inner_text()

        def queued() -> bool:
            now = prompt.inner_text()
            return now != before and re.search(r"[*0-9]", now) is not None

        for _ in range(5):
            try:
                prompt.click(timeout=15_000)
            except PlaywrightError:
                shot = Path(self.lab.root_dir).parent / "failure.png"
                self.page.screenshot(path=str(shot))
                dialog = self.page.locator(".jp-Dialog")
                shown = dialog.first.inner_text() if dialog.count() else ""
                raise AssertionError(f"cannot click cell {index}: {shown!r} ({shot})") from None
            self.page.keyboard.press("Shift+Enter")
            with contextlib.suppress(AssertionError):
                eventually(queued, within=5, what=f"cell {index} queued")
                return
        self.wait_until(queued, 1, f"cell {index} to be queued")

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
        # inner_text is the rendered text, which CSS shows in capitals
        return str(status.first.inner_text()).strip().lower() if status.count() else ""

    def message(self, index: int) -> str:
        """The message text the answer shows so far."""
        messages = self.cell(index).locator(".lmsp-answer .lmsp-message")
        return "".join(str(m.inner_text()) for m in messages.all())

    def wait_until(self, check: Callable[[], object], timeout: float, what: str) -> None:
        """Poll ``check`` until true, or fail saying ``what`` (with a screenshot of the page)."""
        try:
            eventually(check, within=timeout, what=what)
        except AssertionError as error:
            shot = Path(self.lab.root_dir).parent / "failure.png"
            self.page.screenshot(path=str(shot))
            raise AssertionError(f"{error} (the page: {shot})") from None

    def follow(self, index: int, timeout: float) -> tuple[str, list[str]]:
        """Watch the answer in cell ``index`` until a final status: its final message, and
        the texts it showed before that one (each change seen while polling)."""
        seen: list[str] = []

        def final() -> bool:
            text = self.message(index)
            if text and (not seen or text != seen[-1]):
                seen.append(text)
            return self.status(index) in FINAL_STATUSES

        self.wait_until(final, timeout, "a final status")
        answer = self.message(index)
        return answer, [text for text in seen if text != answer]

    def wait_text(self, index: int) -> None:
        """Wait until the answer in cell ``index`` shows some text (it is streaming)."""
        self.wait_until(lambda: len(self.message(index)) > 20, 120, "some text")

    def stream(self) -> str:
        """Run cell 0 (``LOAD``) and cell 1 (an ask); wait until its answer streams; its task id."""
        self.run(0)
        self.run(1)
        self.wait_text(1)
        return self.task_id(1)

    def growing_texts(self, index: int, timeout: float, what: str) -> list[str]:
        """The texts the answer in cell ``index`` shows ``in_progress``, each longer than the
        one before: three, or fewer when the answer reaches a final status first."""
        seen: list[str] = []

        def grown() -> bool:
            text = self.message(index)
            if self.status(index) == "in_progress" and (not seen or len(text) > len(seen[-1])):
                seen.append(text)
            return len(seen) >= 3 or self.status(index) in FINAL_STATUSES

        self.wait_until(grown, timeout, what)
        return seen

    def wait_final(self, index: int, timeout: float = 240) -> str:
        """Wait for the answer in cell ``index`` to reach a final status; return it."""
        self.wait_until(
            lambda: self.status(index) in FINAL_STATUSES, timeout, f"a final status in {index}"
        )
        return self.status(index)

    def task_id(self, index: int) -> str:
        """The task id the answer in cell ``index`` shows."""
        shown = self.cell(index).locator(".lmsp-answer .lmsp-task-id").first.inner_text()
        match = re.search(r"task_[0-9A-Z]{26}", shown)
        assert match, shown
        return match[0]

    def wait_approve(self, index: int, timeout: float) -> Any:
        """Wait until the answer in cell ``index`` offers an enabled Approve button; the button."""
        approve = self.cell(index).locator(".lmsp-approve")
        self.wait_until(
            lambda: approve.count() > 0 and approve.first.is_enabled(), timeout, "Approve"
        )
        return approve

    def printed_calls(self, index: int) -> str:
        """Run cell ``index`` (``print(calls)``) once the kernel is idle; what it printed."""
        self.wait_idle()
        self.run(index)
        self.wait_until(lambda: "[" in self.output_text(index), 30, "the printed calls")
        return self.output_text(index)

    def open_panel(self) -> Any:
        """Open the LMSP side panel from its tab in the side bar; the panel."""
        self.page.locator('.jp-SideBar .lm-TabBar-tab[data-id="lmsp-panel"]').click()
        panel = self.page.locator("#lmsp-panel")
        panel.wait_for(state="visible")
        return panel

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
    """Log in with the token and open ``name`` in JupyterLab, its kernel idle.

    Kernels of earlier tests are shut down first: with several running, JupyterLab asks which
    one the notebook should use instead of starting its own.
    """
    for kernel_id in running_kernels(lab):
        shutdown_kernel(lab, kernel_id)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto(f"{lab.root}lab/tree/{name}?reset&token={lab.token}")
    notebook = Notebook(page, lab, name)
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    wait_kernel(notebook)
    return notebook


def open_story(browser: Browser, lab: LiveServer, name: str, tokens: int) -> Notebook:
    """``name``, a new notebook of ``LOAD`` and a ``STORY`` ask of ``tokens`` tokens, open."""
    return open_notebook(browser, lab, write_notebook(lab, name, LOAD, STORY.format(n=tokens)))


def reopen(notebook: Notebook) -> None:
    """Reload the page, as a user pressing F5, and wait for the notebook again."""
    notebook.page.reload()
    notebook.page.wait_for_selector(".jp-Notebook .jp-Cell")
    notebook.wait_idle()


TASK_MIME = "application/vnd.lmsp.task+json"


def normalized(text: str) -> str:
    """Text compared without the whitespace that Markdown rendering changes."""
    return " ".join(text.split())


def server_task(lab: LiveServer, task: str) -> dict[str, Any]:
    """``GET /tasks/{id}``."""
    with lab.client() as client:
        reply = client.get(f"/tasks/{task}")
        assert reply.status_code == 200, reply.text
        body: dict[str, Any] = reply.json()
        return body


def server_text(lab: LiveServer, task: str) -> str:
    """The answer text the server has for a finished task."""
    return message_text(server_task(lab, task)["result"])


def jupyter_api(lab: LiveServer) -> httpx.Client:
    """A client of the Jupyter server's own REST API (``/api/…``), with the token."""
    headers = {"Authorization": f"token {lab.token}"}
    return httpx.Client(base_url=f"{lab.root}api", headers=headers, timeout=60)


def running_kernels(lab: LiveServer) -> list[str]:
    """The ids of the kernels the server runs."""
    with jupyter_api(lab) as api:
        return [kernel["id"] for kernel in api.get("/kernels").raise_for_status().json()]


def notebook_sessions(lab: LiveServer, name: str) -> list[dict[str, Any]]:
    """The server's sessions of notebook ``name`` (a session's path may be a file id)."""
    with jupyter_api(lab) as api:
        sessions: list[dict[str, Any]] = api.get("/sessions").raise_for_status().json()
    return [s for s in sessions if name in (s["path"], s["name"], s["notebook"]["path"])]


def shutdown_kernel(lab: LiveServer, kernel_id: str) -> None:
    """Shut a kernel down through the server (``DELETE /api/kernels/{id}``)."""
    with jupyter_api(lab) as api:
        assert api.delete(f"/kernels/{kernel_id}").status_code == 204


def saved_answer(lab: LiveServer, name: str, index: int) -> dict[str, Any]:
    """The ``AnswerState`` saved in the outputs of cell ``index`` of notebook ``name``."""
    notebook = nbformat.read(Path(lab.root_dir) / name, as_version=4)
    states = [
        output["data"][TASK_MIME]
        for output in notebook.cells[index].outputs
        if TASK_MIME in output.get("data", {})
    ]
    assert len(states) == 1, f"{len(states)} answers saved in cell {index}"
    state: dict[str, Any] = states[0]
    return state


def kernel_shown(notebook: Notebook) -> bool:
    """Whether the notebook has a kernel: named in its toolbar, idle, with a server session.

    (The execution indicator says ``idle`` before any kernel exists: it is not enough.)
    """
    named = notebook.page.locator(".jp-Toolbar-kernelName").first.inner_text().strip()
    idle = notebook.page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
    return (
        named not in ("", "No Kernel")
        and idle.count() > 0
        and bool(notebook_sessions(notebook.lab, notebook.name))
    )


def wait_kernel(notebook: Notebook) -> None:
    """Wait until the notebook's kernel runs.

    When the kernel specs have not reached the page yet as the notebook opens (a lab that has
    just started, a busy machine), JupyterLab asks which kernel to start instead of starting
    the notebook's own: the preferred one, selected in the dialog, is taken then.
    """
    select = notebook.page.locator(".jp-Dialog").get_by_role("button", name="Select", exact=True)
    notebook.wait_until(
        lambda: select.count() > 0 or kernel_shown(notebook), 120, "a kernel or the dialog"
    )
    if select.count():
        select.click()
        notebook.wait_until(lambda: kernel_shown(notebook), 120, "the selected kernel")


def reopen_without_kernel(notebook: Notebook) -> None:
    """Reload the page and leave the notebook with no kernel at all.

    JupyterLab 4.6 starts the kernel named in the notebook's metadata when it opens it (no
    dialog); once it runs, it is shut down again from the Kernel menu. Were the "Select Kernel"
    dialog shown instead, "No Kernel" is chosen in it.
    """
    page = notebook.page
    lab, name = notebook.lab, notebook.name
    page.reload()
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    dialog = page.locator(".jp-Dialog").get_by_role("button", name="No Kernel", exact=True)
    kernel_name = page.locator(".jp-Toolbar-kernelName").first

    def no_kernel() -> bool:
        return kernel_name.inner_text().strip() == "No Kernel" and not notebook_sessions(lab, name)

    for _ in range(3):
        notebook.wait_until(
            lambda: dialog.count() > 0 or kernel_shown(notebook), 120, "a kernel or the dialog"
        )
        if dialog.count():
            dialog.click()
        else:
            page.locator(".lm-MenuBar-item", has_text="Kernel").click()
            page.locator('.lm-Menu-item[data-command="kernelmenu:shutdown"]').click()
        with contextlib.suppress(AssertionError):
            eventually(no_kernel, within=15, interval=0.1, what="the notebook without a kernel")
            return
    notebook.wait_until(no_kernel, 1, "the notebook without a kernel")
