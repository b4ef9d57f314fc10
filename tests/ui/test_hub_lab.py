"""A JupyterHub user's own JupyterLab, in headless Chromium, on the hub-wide LMSP service
(docs/jupyterhub.md): the user signs in on the hub's login page (the dummy authenticator), the
hub spawns their server, which signs them in through the hub (HubOAuth); its LMSP routes
forward to the hub service, so the side panel lists the hub service's model and ``%lmsp ask``
streams into a cell an answer the hub service generated for that user.

One hub (tests/hub_service.py), its service on the bundled model, one user, one short ask.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page

from tests.conftest import MODEL, LiveServer
from tests.helpers import message_text
from tests.hub_service import Hub, running_hub
from tests.ui import lab as ui

USER = "carol"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, bundled_model_path: Path) -> Iterator[Hub]:
    """The hub, its users' servers JupyterLab with the lab extension under test."""
    tmp = tmp_path_factory.mktemp("hub-lab")
    with running_hub(tmp, users=[USER], singleuser_args=ui.lab_arguments(tmp / "lab")) as running:
        yield running


@pytest.fixture(scope="module")
def lab(hub: Hub) -> Iterator[LiveServer]:
    """The user's server, spawned by the hub, reached with a token of the user that may use it
    (for the test's own calls: the browser signs in through the hub)."""
    home = Path(hub.log).parent / "home" / USER  # hub_service.spawner_config's home
    home.mkdir(parents=True, exist_ok=True)
    url = hub.spawn(USER)
    token = hub.token(USER, scopes=[f"access:servers!user={USER}"])
    try:
        yield LiveServer(url, token, hub.process, str(home))
    finally:
        hub.stop(USER)


def sign_in(browser: Browser, hub: Hub) -> Page:
    """A browser page signed in to the hub as the user (its login form)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto(f"{hub.url}/hub/login")
    page.fill('input[name="username"]', USER)
    page.fill('input[name="password"]', "any")
    with page.expect_navigation():
        page.click("#login_submit")
    assert "/hub/login" not in page.url, page.url
    return page


def test_a_hub_users_lab_lists_the_hub_model_and_streams_an_ask(
    browser: Browser, hub: Hub, lab: LiveServer
) -> None:
    name = ui.write_notebook(lab, "hub.ipynb", ui.LOAD, ui.EXAMPLES, ui.PATTERN.format(n=48))
    page = sign_in(browser, hub)
    # The user's server sends the browser to the hub's OAuth and back: signed in there too.
    page.goto(f"{lab.root}lab/tree/{name}?reset")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    assert page.url.startswith(f"{lab.root}lab"), page.url
    notebook = ui.Notebook(page, lab, name)
    ui.wait_kernel(notebook)

    panel = notebook.open_panel()
    row = panel.locator(f'.lmsp-panel-model[data-model-id="{MODEL}"]')
    notebook.wait_until(lambda: row.count() == 1, 60, "the hub service's model in the panel")

    for index in (0, 1, 2):
        notebook.run(index)
    answer, growing = notebook.follow(2, 240)
    assert notebook.status(2) == "incomplete"  # 48 tokens of more rows: cut by max tokens
    assert len(growing) >= 2, f"fewer than two partial states before the final one: {growing}"
    task_id = notebook.task_id(2)
    assert ui.normalized(answer) == ui.normalized(ui.server_text(lab, task_id))
    # The task is the user's in the hub service: the user's hub token reads it there.
    headers = {"Authorization": f"Bearer {hub.token(USER)}"}
    direct = httpx.get(f"{hub.lmsp}/tasks/{task_id}", headers=headers, timeout=60)
    assert direct.status_code == 200, direct.text
    assert ui.normalized(message_text(direct.json()["result"])) == ui.normalized(answer)
