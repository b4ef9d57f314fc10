"""Embedding models live by the model manager's rules, with the real bundled model embedding
(named in ``LmspApp.embedding_models``): loaded in the memory budget beside the generative
model, evicting it when idle, listed by ``/models`` and Ollama's ``/api/ps`` with their state,
kept for the request's ``keep_alive`` (Ollama's, LMSP's extension) and unloaded on shutdown."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from lmsp_jupyter.engine.catalog import ModelCatalog
from lmsp_jupyter.engine.embedding import Embedders
from lmsp_jupyter.engine.local.llama.embedder import LlamaEmbedder
from tests.conftest import MODEL, LiveServer, running_server, stop_server
from tests.helpers import eventually
from tests.server.helpers import assert_problem

#: The embedding footprint of a model, as the server counts it (the embedders' own).
EMBEDDING_FOOTPRINT = Embedders(LlamaEmbedder, threads=1).footprint


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, bundled_model_path: Path
) -> Iterator[LiveServer]:
    """A server whose bundled model also embeds, that holds one loaded role of it at a time
    (generating or embedding), each kept until it must go."""
    config = {
        "LmspApp": {"embedding_models": {MODEL: "mean"}},
        "ModelManager": {"keep_alive_seconds": -1, "max_loaded_models": 1},
    }
    with running_server(tmp_path_factory.mktemp("embedding-lifecycle"), config=config) as live:
        yield live


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def ollama_client(server: LiveServer) -> ollama.Client:
    return ollama.Client(
        host=f"{server.root}lmsp/ollama", headers={"Authorization": f"Bearer {server.token}"}
    )


def state(client: httpx.Client) -> dict[str, Any]:
    model: dict[str, Any] = client.get(f"/models/{MODEL}").json()
    return model


def unloaded(client: httpx.Client) -> None:
    client.post(f"/models/{MODEL}/unload").raise_for_status()
    assert state(client)["status"] == "available"


def test_an_embedding_is_listed_loaded_with_its_memory_in_both_listings(
    server: LiveServer, client: httpx.Client
) -> None:
    unloaded(client)
    entry = ModelCatalog().get(MODEL)
    client.post("/embeddings", json={"model": MODEL, "input": "hello"}).raise_for_status()
    model = state(client)
    assert model["status"] == "loaded" and model["expires_at"] is None  # keep_alive_seconds -1
    assert model["memory_bytes"] == EMBEDDING_FOOTPRINT(entry)
    running = ollama_client(server).ps().models
    assert [(m.model, m.size) for m in running] == [(MODEL, EMBEDDING_FOOTPRINT(entry))]


def test_generating_evicts_the_idle_embedding_model_and_embedding_the_idle_generator(
    server: LiveServer, client: httpx.Client
) -> None:
    unloaded(client)
    log = Path(server.root_dir).parent / "server.log"
    client.post("/embeddings", json={"model": MODEL, "input": "hello"}).raise_for_status()
    embedding_memory = state(client)["memory_bytes"]
    answer = client.post("/responses", json={"model": MODEL, "input": "Hi", "max_output_tokens": 2})
    assert answer.status_code == 200
    assert f"unloading idle model {MODEL} (embedding) for {MODEL}" in log.read_text()
    generating_memory = state(client)["memory_bytes"]
    client.post("/embeddings", json={"model": MODEL, "input": "hello"}).raise_for_status()
    assert f"unloading idle model {MODEL} (generation) for {MODEL}" in log.read_text()
    assert state(client)["memory_bytes"] == embedding_memory != generating_memory


def test_ollama_keep_alive_on_embed(server: LiveServer, client: httpx.Client) -> None:
    unloaded(client)
    ollama_client(server).embed(model=MODEL, input="hello", keep_alive="10m")
    expires = state(client)["expires_at"]
    assert expires is not None and expires > time.time() + 300
    ollama_client(server).embed(model=MODEL, input="hello", keep_alive=0)
    eventually(lambda: state(client)["status"] == "available", what="unloaded after keep_alive 0")
    assert ollama_client(server).ps().models == []


def test_ollama_embed_of_nothing_loads_and_with_keep_alive_0_unloads(
    server: LiveServer, client: httpx.Client
) -> None:
    unloaded(client)
    loaded = ollama_client(server).embed(model=MODEL, input=[])
    assert loaded.embeddings == [] and state(client)["status"] == "loaded"
    ollama_client(server).embed(model=MODEL, input="", keep_alive=0)
    eventually(lambda: state(client)["status"] == "available", what="unloaded after keep_alive 0")
    with pytest.raises(ollama.ResponseError) as caught:
        ollama_client(server).embed(model="no-such-model", input=[])
    assert caught.value.status_code == 404


def test_lmsp_keep_alive_extension_on_embeddings(client: httpx.Client) -> None:
    unloaded(client)
    own = {"x-lmsp-jupyter": {"keep_alive_seconds": 600}}
    body = {"model": MODEL, "input": "hello", "extensions": own}
    client.post("/embeddings", json=body).raise_for_status()
    expires = state(client)["expires_at"]
    assert expires is not None and expires > time.time() + 300
    own["x-lmsp-jupyter"]["keep_alive_seconds"] = "soon"  # type: ignore[assignment]
    problem = assert_problem(client.post("/embeddings", json=body), 400, "invalid_request")
    assert problem["param"] == "extensions.x-lmsp-jupyter.keep_alive_seconds"


def test_the_embedding_model_is_unloaded_on_shutdown(tmp_path: Path) -> None:
    config = {
        "LmspApp": {"embedding_models": {MODEL: "mean"}},
        "ModelManager": {"keep_alive_seconds": -1},
    }
    with running_server(tmp_path, config=config) as live, live.client() as client:
        client.post("/embeddings", json={"model": MODEL, "input": "hello"}).raise_for_status()
        stop_server(live)
    log = (tmp_path / "server.log").read_text()
    assert f"unloaded model {MODEL} (embedding)" in log
