"""Embeddings: OpenAI's ``POST /lmsp/v1/embeddings`` and Ollama's ``/api/embed`` and
``/api/embeddings``, through the real clients, from the bundled generative model with mean
pooling (named in ``LmspApp.embedding_models``: nothing else may be downloaded here).

Vectors are compared with each other in the same process, never with fixed numbers: a text's
vectors from the same batch bit for bit, from different batches by their cosine similarity
(:func:`tests.helpers.same_text`), as llama.cpp's batch changes a vector's last bits.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import ollama
import openai
import pytest
from langchain_ollama import OllamaEmbeddings

from lmsp_jupyter.client import LmspClient
from lmsp_jupyter.engine.embedding import EMBEDDING_WINDOW
from tests.conftest import MODEL, LiveServer, running_server
from tests.helpers import run_js_client, same_text

TEXTS = ["The cat sat on the mat.", "Stock prices fell sharply today.", "A kitten rests on a rug."]


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, bundled_model_path: Path
) -> Iterator[LiveServer]:
    """A server whose bundled model also embeds, with mean pooling."""
    config = {"LmspApp": {"embedding_models": {MODEL: "mean"}}}
    with running_server(tmp_path_factory.mktemp("embeddings"), config=config) as live:
        yield live


@pytest.fixture(scope="module")
def vectors(server: LiveServer) -> list[list[float]]:
    """The vectors of :data:`TEXTS`, as floats, in one request."""
    with server.client() as client:
        answer = client.post("/embeddings", json={"model": MODEL, "input": TEXTS})
    assert answer.status_code == 200
    return [item["embedding"] for item in answer.json()["data"]]


def ollama_client(server: LiveServer) -> ollama.Client:
    return ollama.Client(
        host=f"{server.root}lmsp/ollama", headers={"Authorization": f"Bearer {server.token}"}
    )


def test_vectors_are_normalized_and_tell_texts_apart(vectors: list[list[float]]) -> None:
    cat, stocks, kitten = (np.array(vector) for vector in vectors)
    assert len({len(vector) for vector in vectors}) == 1 and len(vectors[0]) > 100
    for vector in (cat, stocks, kitten):
        assert math.isclose(float(np.linalg.norm(vector)), 1.0, rel_tol=1e-4)
    assert not same_text(cat, stocks) and not same_text(cat, kitten)


def test_a_batch_gives_each_text_its_own_vector(
    server: LiveServer, vectors: list[list[float]]
) -> None:
    with server.client() as client:
        for text, batched in zip(TEXTS, vectors, strict=True):
            alone = client.post("/embeddings", json={"model": MODEL, "input": text}).json()
            assert same_text(alone["data"][0]["embedding"], batched)
    with server.client() as client:  # the same batch again: the same bits
        again = client.post("/embeddings", json={"model": MODEL, "input": TEXTS}).json()
    assert [item["embedding"] for item in again["data"]] == vectors


def test_openai_sdk_embeddings_create(server: LiveServer, vectors: list[list[float]]) -> None:
    client = openai.OpenAI(base_url=server.lmsp, api_key=server.token, max_retries=0)
    answer = client.embeddings.create(model=MODEL, input=TEXTS)  # the SDK asks for base64
    assert [item.index for item in answer.data] == [0, 1, 2]
    for item, expected in zip(answer.data, vectors, strict=True):
        assert np.allclose(item.embedding, expected, atol=1e-6)
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > len(TEXTS)
    floats = client.embeddings.create(model=MODEL, input=TEXTS[0], encoding_format="float")
    assert same_text(floats.data[0].embedding, vectors[0])


def test_dimensions_are_refused_unless_the_models_own(
    server: LiveServer, vectors: list[list[float]]
) -> None:
    own = len(vectors[0])
    with server.client() as client:
        same = client.post("/embeddings", json={"model": MODEL, "input": "Hi", "dimensions": own})
        other = client.post(
            "/embeddings", json={"model": MODEL, "input": "Hi", "dimensions": own // 2}
        )
    assert same.status_code == 200
    assert other.status_code == 400
    assert (other.json()["code"], other.json()["param"]) == ("invalid_request", "dimensions")


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"model": MODEL, "input": [1, 2, 3]}, "invalid_request", "input[0]"),
        ({"model": MODEL, "input": ""}, "invalid_request", "input"),
        ({"model": MODEL, "input": []}, "invalid_request", "input"),
        (
            {"model": MODEL, "input": "Hi", "encoding_format": "int8"},
            "invalid_request",
            "encoding_format",
        ),
        ({"model": "no-such-model", "input": "Hi"}, "model_not_found", "model"),
        ({"model": MODEL, "input": "word " * 3000}, "context_length_exceeded", "input"),
    ],
)
def test_bad_input_is_a_problem(
    server: LiveServer, body: dict[str, object], code: str, param: str
) -> None:
    with server.client() as client:
        answer = client.post("/embeddings", json=body)
    assert answer.headers["Content-Type"].startswith("application/problem+json")
    problem = answer.json()
    assert (problem["code"], problem["param"]) == (code, param)
    assert answer.status_code < 500


def test_a_model_that_does_not_embed_is_refused(client: httpx.Client) -> None:
    answer = client.post("/embeddings", json={"model": MODEL, "input": "Hi"})
    assert answer.status_code == 400
    assert (answer.json()["code"], answer.json()["param"]) == ("unsupported_capability", "model")


def test_listings_name_the_embedding_capability(server: LiveServer) -> None:
    with server.client() as client:
        model = client.get(f"/models/{MODEL}").json()
    assert "embedding" in model["capabilities"] and "streaming" in model["capabilities"]
    shown = ollama_client(server).show(MODEL)
    assert {"completion", "embedding"} <= set(shown.capabilities or [])


def test_ollama_embed_and_the_older_embeddings(
    server: LiveServer, vectors: list[list[float]]
) -> None:
    client = ollama_client(server)
    answer = client.embed(MODEL, TEXTS)
    assert answer.prompt_eval_count is not None and answer.prompt_eval_count > len(TEXTS)
    assert np.allclose(answer.embeddings, vectors, atol=1e-6)
    older = client.embeddings(MODEL, TEXTS[1])
    assert same_text(older.embedding, vectors[1])
    with pytest.raises(ollama.ResponseError) as caught:
        client.embed(MODEL, "Hi", dimensions=3)
    assert caught.value.status_code == 400 and "dimensions" in caught.value.error


def test_ollama_embed_cuts_a_long_text_unless_truncate_is_false(server: LiveServer) -> None:
    client = ollama_client(server)
    long_text = "word " * 3000  # over the 2048-token window
    cut = client.embed(MODEL, long_text)  # Ollama's default: truncate
    assert cut.prompt_eval_count == EMBEDDING_WINDOW
    assert math.isclose(float(np.linalg.norm(cut.embeddings[0])), 1.0, rel_tol=1e-4)
    with pytest.raises(ollama.ResponseError) as caught:
        client.embed(MODEL, long_text, truncate=False)
    assert caught.value.status_code == 400 and "2048" in caught.value.error
    # the older /api/embeddings has no truncate: it always cuts, as Ollama's runner does
    older = client.embeddings(MODEL, long_text)
    assert np.array_equal(older.embedding, cut.embeddings[0])


def test_langchain_ollama_embeddings(server: LiveServer, vectors: list[list[float]]) -> None:
    embeddings = OllamaEmbeddings(
        model=MODEL,
        base_url=f"{server.root}lmsp/ollama",
        client_kwargs={"headers": {"Authorization": f"Bearer {server.token}"}},
    )
    assert np.allclose(embeddings.embed_documents(TEXTS), vectors, atol=1e-6)
    assert same_text(embeddings.embed_query(TEXTS[2]), vectors[2])


def test_lmsp_client_embed(server: LiveServer, vectors: list[list[float]]) -> None:
    with LmspClient(server.lmsp, server.token) as client:
        assert np.allclose(client.embed(TEXTS, model=MODEL), vectors, atol=1e-6)


def test_ollama_npm_embed(server: LiveServer, vectors: list[list[float]]) -> None:
    """The ``ollama`` npm library's ``embed`` (``tests/compat/js/ollama_embed.mjs``)."""
    env = {
        "OLLAMA_HOST": f"{server.root}lmsp/ollama",
        "LMSP_TOKEN": server.token,
        "LMSP_MODEL": MODEL,
        "LMSP_TEXTS": json.dumps(TEXTS),
    }
    results = run_js_client("ollama_embed.mjs", env)
    assert np.allclose(results["many"]["embeddings"], vectors, atol=1e-6)
    assert results["many"]["promptEvalCount"] > len(TEXTS)
    assert same_text(results["one"][0], vectors[0])
    assert results["error"]["status"] == 400 and "2048" in results["error"]["message"]
