"""Shared fixtures: the bundled model, a live Jupyter server with the extension on loopback."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.server.auth import JUPYTER_SCOPES, hash_token
from lmsp_jupyter.service.store import open_store
from lmsp_jupyter.service.store.interface import Database
from tests.helpers import eventually
from tests.postgres import PostgresServer, find_bin

if TYPE_CHECKING:
    from tests.system.fresh_install import FreshInstall

pytest_plugins = ["pytest_jupyter.jupyter_server"]

MODEL = BUNDLED_MODEL_ID
#: Configured tokens of the live server: one that may only list models, one with every scope.
READER_TOKEN = "reader-secret-token"
EDITOR_TOKEN = "editor-secret-token"
#: Requests the live server's model generates at once.
LIVE_PARALLEL = 2


@pytest.fixture(scope="session")
def bundled_model_path() -> Path:
    """The bundled GGUF, assembled once, under the real HOME, for the tests that need the model.

    A process assembles it once, where HOME says at that moment: a fixture that changes HOME
    (pytest-jupyter's in-process server) must come after this one.
    """
    return ModelCatalog().get(BUNDLED_MODEL_ID).path()


#: The FIM tokens the copy of the bundled model at ``fim_model_path`` names: three of its
#: ``<unusedN>`` tokens, so that llama.cpp loads and runs it as the bundled model.
FIM_IDS = (6, 7, 8)


@pytest.fixture(scope="session")
def fim_model_path(tmp_path_factory: pytest.TempPathFactory, bundled_model_path: Path) -> Path:
    """The bundled model with fill-in-the-middle tokens in its GGUF metadata, alone in a
    directory (``fim/model.gguf``, listed as ``model`` from a ``model_dirs`` entry there)."""
    from lmsp_jupyter.engine.fim import FIM_KEYS
    from tests.engine.gguf_files import with_metadata

    target = tmp_path_factory.mktemp("fim") / "model.gguf"
    return with_metadata(bundled_model_path, target, dict(zip(FIM_KEYS, FIM_IDS, strict=True)))


@pytest.fixture(scope="session")
def chat_model_path(tmp_path_factory: pytest.TempPathFactory, bundled_model_path: Path) -> Path:
    """The bundled model made a chat model: Gemma's turn format as the chat template in its
    GGUF metadata, alone in a directory (``chat/model.gguf``, listed as ``model``)."""
    from tests.chat_template import GEMMA_TEMPLATE
    from tests.engine.gguf_files import with_metadata

    target = tmp_path_factory.mktemp("chat") / "model.gguf"
    return with_metadata(bundled_model_path, target, {"tokenizer.chat_template": GEMMA_TEMPLATE})


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the tests' own (tests/postgres.py); skips the test when there is
    none to start."""
    found = find_bin()
    if isinstance(found, str):
        pytest.skip(found)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install -e '.[test]'")
    try:
        server = PostgresServer(found, free_port())
        server.start()
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"PostgreSQL could not start: {exc} {detail.decode(errors='replace')}")
    yield server
    server.remove()


#: The store backends a test marked with the ``store_kind`` fixture runs on.
STORE_KINDS = ["sqlite", "postgresql"]


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each store backend in turn."""
    kind: str = request.param
    return kind


class Stores:
    """New empty stores of one backend for a test, and the stores it opens on them (closed at
    its end): two stores opened on one URL are what two processes sharing it have."""

    def __init__(self, kind: str, directory: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self._directory = directory
        self._request = request
        self._opened: list[Database] = []
        self._numbers = itertools.count()

    def new(self) -> str:
        """The URL of a new empty store."""
        if self.kind == "sqlite":
            return f"sqlite:///{self._directory / f'store{next(self._numbers)}.sqlite3'}"
        server: PostgresServer = self._request.getfixturevalue("postgres")
        return server.new_database()

    def open(self, url: str) -> Database:
        """The store at ``url``, closed at the test's end."""
        store = open_store(url)
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            store.close()


@pytest.fixture
def stores(
    store_kind: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stores]:
    """New stores on each backend in turn (:class:`Stores`)."""
    opened = Stores(store_kind, tmp_path_factory.mktemp("stores"), request)
    yield opened
    opened.close()


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LiveServer:
    """A ``jupyter server`` process with the extension, on a loopback port."""

    root: str
    token: str
    process: subprocess.Popen[bytes]
    root_dir: str
    #: Its ``LmspApp.store_url`` when configured (``None``: its default store).
    store_url: str | None = None

    @property
    def lmsp(self) -> str:
        """The base of the LMSP endpoints."""
        return f"{self.root}lmsp/v1"

    @property
    def default_store(self) -> Path:
        """Where the service keeps its SQLite store unless configured otherwise (its Jupyter
        data directory, a sibling of its root directory)."""
        return Path(self.root_dir).parent / "data" / "lmsp" / "lmsp.sqlite3"

    @property
    def store(self) -> str:
        """The URL of its store."""
        return self.store_url or f"sqlite:///{self.default_store}"

    def client(self, *, token: str | None = None, **kwargs: object) -> httpx.Client:
        """An HTTP client sending ``token`` (default: the server's) as a Bearer token."""
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(base_url=self.lmsp, headers=headers, timeout=120, **kwargs)  # type: ignore[arg-type]


def start_server(
    tmp: Path,
    *extra: str,
    app: str = "server",
    base_url: str = "/jp/",
    config: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> LiveServer:
    """Start ``jupyter server`` (or ``jupyter lmsp``) and wait until LMSP answers; ``environ``
    adds to its environment."""
    port, token = free_port(), secrets.token_hex(16)
    for name in ("config", "data", "runtime", "root"):
        (tmp / name).mkdir(parents=True, exist_ok=True)
    (tmp / "config" / "jupyter_server_config.json").write_text(json.dumps(config or {}))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp / "config"),
        "JUPYTER_DATA_DIR": str(tmp / "data"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        **(environ or {}),
    }
    command = [
        str(Path(sys.executable).with_name(f"jupyter-{app}")),
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={tmp / 'root'}",
        f"--ServerApp.base_url={base_url}",
        "--LmspApp.ollama_dir=",
        "--LmspApp.huggingface_cache_dir=",
        *(["--allow-root"] if os.geteuid() == 0 else []),
        *extra,
    ]
    with (tmp / "server.log").open("wb") as log:  # the server writes to its own copy
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = LiveServer(
        root=f"http://127.0.0.1:{port}{base_url}",
        token=token,
        process=process,
        root_dir=str(tmp / "root"),
    )

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError((tmp / "server.log").read_text())
        with contextlib.suppress(httpx.TransportError), server.client() as client:
            return client.get("").status_code == 200
        return False

    try:
        eventually(answers, within=90, interval=0.2, what="the server answering")
    except AssertionError:
        process.kill()
        raise
    return server


@contextlib.contextmanager
def running_server(
    tmp: Path,
    *extra: str,
    config: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Iterator[LiveServer]:
    """:func:`start_server` with ``jupyter server``, stopped after the block."""
    server = start_server(tmp, *extra, config=config, environ=environ)
    try:
        yield server
    finally:
        stop_server(server)


def stop_server(server: LiveServer) -> None:
    """Stop the server and wait for it."""
    server.process.terminate()
    try:
        server.process.wait(20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


def live_config(**lmsp: object) -> dict[str, object]:
    """The live server's config, with ``lmsp`` settings of ``LmspApp`` added."""
    tokens = [
        {"name": "reader", "sha256": hash_token(READER_TOKEN), "scopes": ["models:read"]},
        {"name": "editor", "sha256": hash_token(EDITOR_TOKEN), "scopes": sorted(JUPYTER_SCOPES)},
    ]
    # The line holds the load test's 200 connections (tests/system/test_load.py) instead of
    # refusing those beyond 64 with 503 overloaded.
    return {
        "LmspApp": {"tokens": tokens, "max_queued_tasks": 256, **lmsp},
        "LocalEngine": {"parallel_requests": LIVE_PARALLEL},
    }


@pytest.fixture(scope="session")
def live_server(
    tmp_path_factory: pytest.TempPathFactory, bundled_model_path: Path
) -> Iterator[LiveServer]:
    """One ``jupyter server`` for the session, mounted under base_url ``/jp/``, generating with
    the bundled model."""
    with running_server(tmp_path_factory.mktemp("live"), config=live_config()) as server:
        yield server


@contextlib.contextmanager
def live_server_on(
    store_kind: str,
    session_server: LiveServer,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiveServer]:
    """The session's live server (SQLite), or one like it on a new PostgreSQL database: a
    module's tests run on each store by overriding ``live_server`` with this."""
    if store_kind == "sqlite":
        yield session_server
        return
    url = request.getfixturevalue("postgres").new_database()
    tmp = tmp_path_factory.mktemp("live-postgresql")
    with running_server(tmp, config=live_config(store_url=url)) as server:
        server.store_url = url
        yield server


@pytest.fixture
def client(live_server: LiveServer) -> Iterator[httpx.Client]:
    """An HTTP client of the live server, authenticated with its token."""
    with live_server.client() as http:
        yield http


@pytest.fixture(scope="session")
def install(tmp_path_factory: pytest.TempPathFactory) -> FreshInstall:
    """The repository installed by ``binder/postBuild`` into a fresh venv (Binder's and the
    packaging tests')."""
    from tests.system.fresh_install import fresh_install  # it imports this module

    return fresh_install(tmp_path_factory)
