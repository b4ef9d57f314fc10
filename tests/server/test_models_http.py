"""Models come and go, over HTTP: load and unload, statuses, keep-alive, the memory budget.

One live server with two real models (the bundled GGUF and a copy of it under another name in a
configured model directory) and a memory budget that holds one of them. Its model directories
are given as users type them, a JSON list on the command line, one of them missing.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.engine.manager import RETRY_AFTER_SECONDS
from lmsp_jupyter.engine.memory import footprint, resident_bytes
from lmsp_jupyter.server.auth import hash_token
from tests.conftest import LiveServer, running_server, start_server, stop_server
from tests.helpers import eventually
from tests.server.helpers import assert_problem

COPY = "gemma-copy"
CONTEXT = 2048
PARALLEL = 2
READER_TOKEN = "models-reader-token"
WRITER_TOKEN = "models-writer-token"
BUNDLED = quote(BUNDLED_MODEL_ID, safe="")
KEEP_ALIVE = "x-lmsp-jupyter"


def model_footprint() -> int:
    """What the server estimates for either model: weights, and a cache of the test's context
    size for each parallel sequence."""
    entry = ModelCatalog().get(BUNDLED_MODEL_ID)
    return footprint(entry.weights_bytes, entry.kv_bytes_per_token, CONTEXT, PARALLEL)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory, bundled_model_path: Path) -> tuple[Path, Path]:
    """A model directory with a copy of the bundled GGUF, and one that does not exist."""
    directory = tmp_path_factory.mktemp("gguf")
    shutil.copyfile(bundled_model_path, directory / f"{COPY}.gguf")
    return directory, directory / "missing"


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, dirs: tuple[Path, Path]
) -> Iterator[LiveServer]:
    tokens = [
        {"name": "reader", "sha256": hash_token(READER_TOKEN), "scopes": ["models:read"]},
        {"name": "writer", "sha256": hash_token(WRITER_TOKEN), "scopes": ["models:write"]},
    ]
    config = {
        "LmspApp": {"tokens": tokens},
        "LocalEngine": {"context_size": CONTEXT, "parallel_requests": PARALLEL},
        "ModelManager": {
            "keep_alive_seconds": -1,
            "memory_budget_bytes": int(1.5 * model_footprint()),
        },
    }
    with running_server(
        tmp_path_factory.mktemp("models-server"),
        f"--LmspApp.model_dirs={json.dumps([str(d) for d in dirs])}",
        config=config,
    ) as live:
        yield live


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client() as http:
        yield http
    with server.client() as http:  # every test starts with nothing loaded
        for model_id in (BUNDLED, COPY):
            eventually(partial(unloaded, http, model_id), what="unload")


def unloaded(http: httpx.Client, model_id: str) -> bool:
    """Unload a model; ``False`` while it is in use."""
    return http.post(f"/models/{model_id}/unload").status_code == 200


def model(client: httpx.Client, model_id: str) -> dict[str, Any]:
    """``GET /models/{id}``."""
    one: dict[str, Any] = client.get(f"/models/{quote(model_id, safe='')}").json()
    return one


def listed(client: httpx.Client, model_id: str) -> dict[str, Any]:
    """The model as ``GET /models`` lists it."""
    found = [m for m in client.get("/models").json()["data"] if m["id"] == model_id]
    assert len(found) == 1
    return dict(found[0])


def ask(model_id: str, tokens: int = 4, **fields: object) -> dict[str, object]:
    return {"model": model_id, "input": "Once upon a time", "temperature": 0,
            "max_output_tokens": tokens, **fields}  # fmt: skip


class Streaming:
    """A long streamed answer, read on a thread until ``stop`` (which closes it)."""

    def __init__(self, server: LiveServer, model_id: str) -> None:
        self.started = threading.Event()
        self.stop = threading.Event()
        self.events: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(server, model_id))
        self._thread.start()

    def _read(self, server: LiveServer, model_id: str) -> None:
        with (
            server.client() as http,
            http.stream("POST", "/responses", json=ask(model_id, 2000, stream=True)) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("event: "):
                    self.events.append(line.removeprefix("event: "))
                if "response.output_text.delta" in self.events:
                    self.started.set()
                if self.stop.is_set():
                    return

    def close(self) -> None:
        self.stop.set()
        self._thread.join()


# --- model directories as users type them --------------------------------------------------


def test_model_dirs_as_a_json_list_and_a_notice_for_a_missing_one(
    server: LiveServer, client: httpx.Client, dirs: tuple[Path, Path]
) -> None:
    listing = client.get("/models").json()
    assert [m["id"] for m in listing["data"]] == [BUNDLED_MODEL_ID, COPY]
    notice = f"model directory {dirs[1]} does not exist"
    assert listing["extensions"] == {"x-lmsp-jupyter": {"notices": [notice]}}
    log = (Path(server.root_dir).parent / "server.log").read_text()
    assert notice in log


# --- endpoints and scopes ------------------------------------------------------------------


def test_load_and_unload_need_the_models_write_scope(server: LiveServer) -> None:
    for path in (f"/models/{COPY}/load", f"/models/{COPY}/unload"):
        with server.client(token=READER_TOKEN) as reader:
            refused = reader.post(path)
            assert reader.get(f"/models/{COPY}").status_code == 200
        assert_problem(refused, 403, "insufficient_scope")
        assert refused.headers["WWW-Authenticate"] == (
            'Bearer error="insufficient_scope", scope="models:write"'
        )
        assert_problem(httpx.post(f"{server.lmsp}{path}"), 401, "unauthorized")
    with server.client(token=WRITER_TOKEN) as writer:
        assert writer.post(f"/models/{COPY}/unload").status_code == 200
        assert_problem(writer.get("/models"), 403, "insufficient_scope")


def test_unknown_models_and_wrong_methods(client: httpx.Client) -> None:
    assert_problem(client.post("/models/nope%3A1b/load"), 404, "model_not_found")
    assert_problem(client.post("/models/nope%3A1b/unload"), 404, "model_not_found")
    wrong = client.get(f"/models/{COPY}/load")
    assert_problem(wrong, 405, "method_not_allowed")
    assert wrong.headers["Allow"] == "POST"


def test_load_shows_loading_then_loaded_and_unload_makes_it_available(
    server: LiveServer, client: httpx.Client
) -> None:
    assert model(client, COPY)["status"] == "available"
    assert "memory_bytes" not in model(client, COPY)
    loaded: list[httpx.Response] = []
    loader = threading.Thread(target=lambda: loaded.append(client.post(f"/models/{COPY}/load")))
    loader.start()
    seen: list[str] = []

    def watch() -> bool:
        status = str(model(client, COPY)["status"])
        if not seen or seen[-1] != status:
            seen.append(status)
        return status == "loaded"

    eventually(watch, what="the copy loaded")
    loader.join()
    assert seen[-2:] == ["loading", "loaded"]
    assert loaded[0].status_code == 200, loaded[0].text
    body = loaded[0].json()
    assert body["status"] == "loaded"
    assert body["memory_bytes"] == model_footprint()
    assert abs(body["loaded_at"] - time.time()) < 300
    assert body["expires_at"] is None  # keep_alive_seconds -1: never unloaded for being idle
    assert model(client, COPY) == listed(client, COPY) == body

    unloaded = client.post(f"/models/{COPY}/unload")
    assert unloaded.status_code == 200
    assert unloaded.json() == {k: v for k, v in body.items() if k not in (
        "memory_bytes", "loaded_at", "expires_at")} | {"status": "available"}  # fmt: skip
    assert model(client, COPY)["status"] == "available"
    assert client.post(f"/models/{COPY}/unload").status_code == 200  # not loaded: stays so


# --- in use, the budget, keep-alive --------------------------------------------------------


def test_a_model_in_use_is_not_unloaded_and_another_gets_503_until_it_is_idle(
    server: LiveServer, client: httpx.Client
) -> None:
    streaming = Streaming(server, BUNDLED_MODEL_ID)
    try:
        assert streaming.started.wait(300), streaming.events
        busy = assert_problem(client.post(f"/models/{BUNDLED}/unload"), 409, "model_busy")
        assert busy["detail"] == f"model {BUNDLED_MODEL_ID!r} is in use"

        refused = client.post("/responses", json=ask(COPY))
        problem = assert_problem(refused, 503, "overloaded")
        assert refused.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
        size = f"{model_footprint() / 1e6:,.0f} MB"
        assert problem["detail"] == (
            f"model '{COPY}' needs about {size} and does not fit (memory budget "
            f"{int(1.5 * model_footprint()) / 1e6:,.0f} MB, at most 3 loaded models); "
            f"loaded: '{BUNDLED_MODEL_ID}' ({size}, in use)"
        )
        assert_problem(client.post(f"/models/{COPY}/load"), 503, "overloaded")
        task = client.post("/tasks", json={"type": "response", "request": ask(COPY)})
        assert_problem(task, 503, "overloaded")
        assert model(client, BUNDLED_MODEL_ID)["status"] == "loaded"
        assert model(client, COPY)["status"] == "available"
    finally:
        streaming.close()

    # The stream is gone, so the bundled model is idle: it makes room (least recently used).
    eventually(
        lambda: client.post("/responses", json=ask(COPY)).status_code == 200,
        what="the copy answers",
    )
    assert model(client, COPY)["status"] == "loaded"
    assert model(client, BUNDLED_MODEL_ID)["status"] == "available"


def test_the_first_request_for_an_unloaded_model_streams_from_response_created(
    client: httpx.Client,
) -> None:
    assert model(client, COPY)["status"] == "available"
    with client.stream("POST", "/responses", json=ask(COPY, stream=True)) as response:
        assert response.status_code == 200
        names = [line[7:] for line in response.iter_lines() if line.startswith("event: ")]
    assert names[0] == "response.created"
    assert names[-1] == "response.incomplete"
    assert model(client, COPY)["status"] == "loaded"


def test_an_idle_model_is_unloaded_after_the_requests_keep_alive_and_memory_returns(
    server: LiveServer, client: httpx.Client
) -> None:
    weights = ModelCatalog().get(BUNDLED_MODEL_ID).weights_bytes
    answer = client.post(
        "/responses", json=ask(COPY, extensions={KEEP_ALIVE: {"keep_alive_seconds": 2}})
    )
    assert answer.status_code == 200, answer.text
    loaded = resident_bytes(server.process.pid)
    state = model(client, COPY)
    assert state["status"] == "loaded"
    assert 0 < state["expires_at"] - time.time() <= 3

    eventually(lambda: model(client, COPY)["status"] == "available", what="the idle unload")
    assert loaded - resident_bytes(server.process.pid) >= weights


def test_a_keep_alive_that_is_not_a_number_is_invalid_request(client: httpx.Client) -> None:
    for value in ("5", True, None, [1]):
        body = ask(COPY, extensions={KEEP_ALIVE: {"keep_alive_seconds": value}})
        problem = assert_problem(client.post("/responses", json=body), 400, "invalid_request")
        assert problem["param"] == "extensions.x-lmsp-jupyter.keep_alive_seconds"
    assert model(client, COPY)["status"] == "available"


# --- the bundled model's one-time assembly ---------------------------------------------------


@pytest.fixture(scope="module")
def fresh_home_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server whose HOME has no assembled bundled model yet."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        live = start_server(tmp_path_factory.mktemp("fresh-home-server"))
    yield live
    stop_server(live)


def test_the_bundled_models_assembly_shows_progress_and_two_first_requests_assemble_once(
    fresh_home_server: LiveServer,
) -> None:
    server = fresh_home_server
    answers: list[httpx.Response] = []

    def first_request() -> None:
        # Two assemblies and loads on a busy machine may take minutes: a long read timeout.
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.lmsp, headers=headers, timeout=900) as http:
            answers.append(http.post("/responses", json=ask(BUNDLED_MODEL_ID)))

    requests = [threading.Thread(target=first_request) for _ in range(2)]
    for request in requests:
        request.start()
    seen: list[dict[str, Any]] = []
    with server.client() as client:
        while any(request.is_alive() for request in requests):
            state = model(client, BUNDLED_MODEL_ID)
            seen.append(state)
        for request in requests:
            request.join()
        assert model(client, BUNDLED_MODEL_ID)["status"] == "loaded"
    assert [answer.status_code for answer in answers] == [200, 200]
    # Extensions may say more (``inexact`` on a build without AVX2): only ``loading`` counts.
    loading = [s for s in seen if "loading" in s.get("extensions", {}).get("x-lmsp-jupyter", {})]
    progress = [s["extensions"]["x-lmsp-jupyter"]["loading"] for s in loading]
    assert progress, [s["status"] for s in seen]
    assert all(s["status"] == "loading" for s in loading)
    assert {p["stage"] for p in progress} == {"assembling the GGUF file"}
    fractions = [p["fraction"] for p in progress]
    assert fractions == sorted(fractions) and 0 < fractions[0] <= fractions[-1] <= 1

    log = (Path(server.root_dir).parent / "server.log").read_text()
    size = ModelCatalog().get(BUNDLED_MODEL_ID).size_bytes // 10**6
    assert log.count(f"assembled the bundled model {BUNDLED_MODEL_ID} ({size} MB)") == 1
    assert f"assembling the GGUF file, 100% ({size} of {size} MB)" in log
