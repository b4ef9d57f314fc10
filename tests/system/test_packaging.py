"""The wheel and the sdist carry what JupyterLab and Jupyter Server need, and nothing else."""

from __future__ import annotations

import json
import re
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import stop_server
from tests.system.fresh_install import INSTALL_TIMEOUT, FreshInstall, bearer, report, start_jupyter

LABEXTENSION = "share/jupyter/labextensions/lmsp-jupyter"
#: The one place the version is written.
VERSION = json.loads((Path(__file__).parents[2] / "labextension" / "package.json").read_text())[
    "version"
]
SERVER_CONFIG = "etc/jupyter/jupyter_server_config.d/lmsp_jupyter.json"


@dataclass
class BuiltWheel:
    """The wheel of the clone and how long ``pip wheel`` took."""

    path: Path
    seconds: float


@pytest.fixture(scope="module")
def built(install: FreshInstall, tmp_path_factory: pytest.TempPathFactory) -> BuiltWheel:
    """``pip wheel . --no-deps`` of the clone, installed over the fresh venv's copy."""
    dist = tmp_path_factory.mktemp("wheel")
    started = time.monotonic()
    install.run("python", "-m", "pip", "wheel", ".", "--no-deps", "--wheel-dir", dist)
    seconds = time.monotonic() - started
    (path,) = dist.glob("lmsp_jupyter-*.whl")
    install.run("python", "-m", "pip", "install", "--no-deps", "--force-reinstall", path)
    return BuiltWheel(path, seconds)


@pytest.fixture
def wheel(built: BuiltWheel) -> Path:
    """The path of the built wheel."""
    return built.path


def data_files(wheel: Path) -> dict[str, str]:
    """The wheel's ``.data/data/`` files, by their path under the environment's prefix."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    return {
        name.split(".data/data/", 1)[1]: name
        for name in names
        if re.match(r"lmsp_jupyter-[^/]+\.data/data/", name)
    }


def remote_entry(wheel: Path) -> str:
    """The lab extension's entry point, as its built ``package.json`` names it."""
    with zipfile.ZipFile(wheel) as archive:
        package = json.loads(archive.read(data_files(wheel)[f"{LABEXTENSION}/package.json"]))
    load: str = package["jupyterlab"]["_build"]["load"]
    return load


def page_config(html: str) -> dict[str, Any]:
    """The page config JupyterLab embeds in its HTML page."""
    match = re.search(
        r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S
    )
    assert match is not None, html
    config: dict[str, Any] = json.loads(match[1])
    return config


@pytest.mark.timeout(INSTALL_TIMEOUT + 600)
def test_wheel_holds_the_lab_extension_widget_and_server_config(
    install: FreshInstall, built: BuiltWheel, capsys: pytest.CaptureFixture[str]
) -> None:
    report(capsys, f"[packaging] postBuild {install.seconds:.0f} s, wheel {built.seconds:.0f} s")
    wheel = built.path
    files = data_files(wheel)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        config = json.loads(archive.read(files[SERVER_CONFIG]))
    assert f"{LABEXTENSION}/package.json" in files
    assert wheel.name == f"lmsp_jupyter-{VERSION}-py3-none-any.whl"
    version = install.output("python", "-c", "import lmsp_jupyter; print(lmsp_jupyter.__version__)")
    assert version.strip() == VERSION
    assert re.fullmatch(r"static/remoteEntry\.[0-9a-f]+\.js", remote_entry(wheel))
    assert f"{LABEXTENSION}/{remote_entry(wheel)}" in files
    assert "lmsp_jupyter/static/widget.js" in names
    assert config == {"ServerApp": {"jpserver_extensions": {"lmsp_jupyter": True}}}
    assert not [name for name in names if "node_modules" in name]


@pytest.mark.timeout(INSTALL_TIMEOUT + 600)
def test_jupyter_lists_both_extensions_enabled_and_ok(install: FreshInstall, wheel: Path) -> None:
    install.run("python", "-m", "pip", "check")
    lab = install.output("jupyter", "labextension", "list")
    assert re.search(
        rf"^\s+lmsp-jupyter v{re.escape(VERSION)} enabled OK \(python, lmsp-jupyter\)$", lab, re.M
    )
    server = install.output("jupyter", "server", "extension", "list")
    assert re.search(r"^\s+lmsp_jupyter enabled$", server, re.M), server
    assert re.search(r"^\s+lmsp_jupyter \S+ OK$", server, re.M), server


@pytest.mark.timeout(INSTALL_TIMEOUT + 600)
def test_sdist_holds_the_labextension_sources_without_node_modules(
    install: FreshInstall, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install.run("python", "-m", "pip", "install", "--quiet", "build")
    started = time.monotonic()
    install.run("python", "-m", "build", "--sdist", "--outdir", tmp_path, timeout=900)
    report(capsys, f"[packaging] sdist {time.monotonic() - started:.0f} s")
    (sdist,) = tmp_path.glob("lmsp_jupyter-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {
        "labextension/package.json",
        "labextension/src/index.ts",
        "labextension/src/panel/panel.ts",
        "labextension/src/panel/status.ts",
    } <= names
    assert not [name for name in names if "node_modules" in name]


@pytest.mark.timeout(INSTALL_TIMEOUT + 600)
def test_jupyterlab_serves_the_installed_extension(
    install: FreshInstall, wheel: Path, tmp_path: Path
) -> None:
    server = start_jupyter(install, ["jupyter", "lab"], tmp_path, "lab")
    try:
        page = httpx.get(f"{server.root}lab", headers=bearer(server), timeout=60).text
        config = page_config(page)
        extension = next(e for e in config["federated_extensions"] if e["name"] == "lmsp-jupyter")
        script = httpx.get(
            f"{server.root}lab/extensions/lmsp-jupyter/{extension['load']}",
            headers=bearer(server),
            timeout=60,
        )
    finally:
        stop_server(server)
    assert extension["load"] == remote_entry(wheel)
    assert script.status_code == 200
    assert "javascript" in script.headers["content-type"]
    assert '"lmsp-jupyter"' in script.text
