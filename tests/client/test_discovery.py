"""``discover()``: the environment, then running servers' runtime files, then an own server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from lmsp_jupyter.client import LmspClient, ServiceLocation, discover
from lmsp_jupyter.server.app import export_location
from tests.conftest import EDITOR_TOKEN, MODEL, LiveServer, free_port


def runtime_dir(server: LiveServer) -> Path:
    """The JUPYTER_RUNTIME_DIR ``start_server`` gave the server."""
    return Path(server.root_dir).parent / "runtime"


def write_server_file(directory: Path, name: str, **info: Any) -> None:
    (directory / f"jpserver-{name}.json").write_text(json.dumps(info))


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty runtime directory of our own, and no LMSP variables."""
    directory = tmp_path / "runtime"
    directory.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(directory))
    monkeypatch.delenv("LMSP_URL", raising=False)
    monkeypatch.delenv("LMSP_TOKEN", raising=False)
    return directory


# --- 1. the environment ---------------------------------------------------------------------


def test_the_environment_wins(
    live_server: LiveServer, runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(runtime_dir(live_server), runtime, dirs_exist_ok=True)
    monkeypatch.setenv("LMSP_URL", live_server.lmsp + "/")
    monkeypatch.setenv("LMSP_TOKEN", EDITOR_TOKEN)
    assert discover() == ServiceLocation(live_server.lmsp, EDITOR_TOKEN)
    with LmspClient() as client:
        assert client.base_url == live_server.lmsp
        assert [model.id for model in client.models()] == [MODEL]


def test_a_url_without_a_token_sends_none(runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMSP_URL", "http://127.0.0.1:9/lmsp/v1")
    assert discover() == ServiceLocation("http://127.0.0.1:9/lmsp/v1", None)


# --- 2. running servers' runtime files ------------------------------------------------------


def test_a_running_server_is_found_by_its_runtime_file(
    live_server: LiveServer, runtime: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(runtime_dir(live_server), runtime, dirs_exist_ok=True)
    dead = f"http://127.0.0.1:{free_port()}/"
    write_server_file(runtime, "1", url=dead, token="x", root_dir=str(tmp_path), pid=os.getpid())
    monkeypatch.chdir(tmp_path)
    assert discover() == ServiceLocation(live_server.lmsp, live_server.token)


def test_a_server_whose_root_holds_the_cwd_is_preferred(
    live_server: LiveServer, runtime: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(runtime_dir(live_server), runtime, dirs_exist_ok=True)
    (tmp_path / "notebooks").mkdir()
    write_server_file(
        runtime,
        "2",
        url=live_server.root,
        token=EDITOR_TOKEN,
        root_dir=str(tmp_path),
        pid=os.getpid(),
    )
    monkeypatch.chdir(tmp_path / "notebooks")
    assert discover() == ServiceLocation(live_server.lmsp, EDITOR_TOKEN)


# --- 3. a server of our own, in this process ------------------------------------------------

INPROCESS = """
import json, os, threading
from lmsp_jupyter.client import LmspClient, discover
from lmsp_jupyter.client._inprocess import start_inprocess_service
location = discover()
with LmspClient() as client:
    response = client.create_response(
        {"model": MODEL, "input": "Hello", "temperature": 0, "max_output_tokens": 2}
    )
    models = [model.id for model in client.models()]
print(json.dumps({
    "url": location.base_url,
    "token": bool(location.token),
    "again": discover() == location,
    "cached": start_inprocess_service() is location,
    "models": models,
    "tokens": response.usage.output_tokens,
    "exported": os.environ.get("LMSP_URL") == location.base_url,
    "runtime": [
        name for name in os.listdir(os.environ["JUPYTER_RUNTIME_DIR"]) if name.startswith("jp")
    ],
    "thread": [t.daemon for t in threading.enumerate() if t.name == "lmsp-inprocess-service"],
}))
"""


def test_with_nothing_running_a_server_is_started_in_process(tmp_path: Path) -> None:
    for name in ("runtime", "config", "data", "none"):
        (tmp_path / name).mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("LMSP_URL", "LMSP_TOKEN")}
    env.update(
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
        OLLAMA_MODELS=str(tmp_path / "none"),
        HF_HUB_CACHE=str(tmp_path / "none"),
        PYTHONPATH=str(Path(__file__).parents[2]),
    )
    script = f"MODEL = {MODEL!r}\n" + textwrap.dedent(INPROCESS)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result.pop("url").startswith("http://127.0.0.1:")
    assert result == {
        "token": True,
        "again": True,
        "cached": True,
        "models": [MODEL],
        "tokens": 2,
        "exported": True,
        "runtime": [],
        "thread": [True],
    }
    assert "Traceback" not in done.stderr


# --- the server extension exports LMSP_URL and LMSP_TOKEN to its kernels --------------------

KERNEL_CODE = """
import json, os
from lmsp_jupyter.client import LmspClient
with LmspClient() as client:
    models = [model.id for model in client.models()]
print(json.dumps([os.environ["LMSP_URL"], os.environ["LMSP_TOKEN"], models]))
"""


def test_kernels_of_the_server_find_it_through_the_environment(live_server: LiveServer) -> None:
    api = httpx.Client(
        base_url=f"{live_server.root}api",
        headers={"Authorization": f"token {live_server.token}"},
        timeout=60,
    )
    started = api.post("/kernels", json={"name": "python3"})
    assert started.status_code == 201, started.text
    kernel_id = started.json()["id"]
    kernel = BlockingKernelClient(
        connection_file=str(runtime_dir(live_server) / f"kernel-{kernel_id}.json")
    )
    output: list[str] = []

    def collect(message: dict[str, Any]) -> None:
        if message["msg_type"] == "stream":
            output.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            output.append("\n".join(message["content"]["traceback"]))

    try:
        kernel.load_connection_file()
        kernel.start_channels()
        kernel.wait_for_ready(timeout=60)
        kernel.execute_interactive(KERNEL_CODE, output_hook=collect, timeout=60)
    finally:
        kernel.stop_channels()
        assert api.delete(f"/kernels/{kernel_id}").status_code == 204
        api.close()
    assert json.loads("".join(output)) == [live_server.lmsp, live_server.token, [MODEL]]


def serverapp(ip: str = "127.0.0.1", **fields: Any) -> SimpleNamespace:
    values: dict[str, Any] = {
        "sock": "",
        "port": 8888,
        "base_url": "/jp/",
        "root_dir": "/home/me/work",
        "certfile": "",
        "identity_provider": SimpleNamespace(token="jupyter-token"),
    }
    return SimpleNamespace(ip=ip, **{**values, **fields})


@pytest.mark.parametrize(
    ("ip", "host"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("", "127.0.0.1"),
        ("0.0.0.0", "127.0.0.1"),
        ("::", "[::1]"),
        ("::1", "[::1]"),
        ("localhost", "localhost"),
        ("10.1.2.3", "10.1.2.3"),
    ],
)
def test_the_exported_url_is_the_servers_own_address_or_loopback(ip: str, host: str) -> None:
    environ: dict[str, str] = {}
    export_location(serverapp(ip), environ)
    assert environ == {
        "LMSP_URL": f"http://{host}:8888/jp/lmsp/v1",
        "LMSP_TOKEN": "jupyter-token",
        "LMSP_ROOT_DIR": "/home/me/work",
    }


def test_a_server_with_tls_exports_an_https_url() -> None:
    environ: dict[str, str] = {}
    export_location(serverapp(certfile="/etc/cert.pem"), environ)
    assert environ["LMSP_URL"] == "https://127.0.0.1:8888/jp/lmsp/v1"


def test_a_server_without_a_token_unsets_an_inherited_one() -> None:
    environ = {"LMSP_TOKEN": "from-a-parent"}
    export_location(serverapp(identity_provider=SimpleNamespace(token="")), environ)
    assert environ == {
        "LMSP_URL": "http://127.0.0.1:8888/jp/lmsp/v1",
        "LMSP_ROOT_DIR": "/home/me/work",
    }


def test_a_server_on_a_unix_socket_exports_only_its_root() -> None:
    environ = {"LMSP_URL": "http://inherited/lmsp/v1"}
    export_location(serverapp(sock="/tmp/jupyter.sock"), environ)
    assert environ == {"LMSP_URL": "http://inherited/lmsp/v1", "LMSP_ROOT_DIR": "/home/me/work"}
