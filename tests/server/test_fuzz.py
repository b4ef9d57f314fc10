"""Every dialect fuzzed in CI-sized batches against a live server whose models are the scripted
engine (each answer is two deltas, so ten thousand requests stay cheap).

Each batch sends schemathesis' cases of every operation of the served OpenAPI document (LMSP,
OpenAI's Responses fields, Chat Completions, Completions, embeddings, usage; positive and
negative, a new seed each batch) and hand-made Hypothesis cases of Ollama's API (its shapes
with good and junk values in every field, bodies that are not JSON, wrong methods and paths).
Every reply: never a 5xx; an LMSP error a problem document with a code of the spec's table and
everything else as the document says (tests/server/fuzzing.py); an Ollama error its
``{"error": "..."}`` and a stream one JSON object a line. After each batch the server answers a
normal request of each dialect.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from tests.conftest import MODEL, LiveServer, running_server
from tests.helpers import ROOT
from tests.server.fuzzing import CHECKS, Fuzzer, FuzzRun, cancel_leftover_tasks

#: Batches run (CI: 2; ``LMSP_FUZZ_BATCHES=8``, the long form, docs/reliability.md), each with
#: a seed of its own: cases per operation and generation mode in each (the OpenAPI document
#: has 18 operations: 36 labels), and Ollama cases per batch.
BATCHES = int(os.environ.get("LMSP_FUZZ_BATCHES", "2"))
EXAMPLES = 25
OLLAMA_EXAMPLES = 400
#: What the batches' requests add up to, at least (8 batches: 10,000).
MIN_REQUESTS = BATCHES * 1250


@pytest.fixture(scope="module")
def scripted_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A ``jupyter server`` whose local models are the scripted engine (tests/doubles.py)."""
    config = {
        "LmspApp": {"engine_class": "tests.doubles.ScriptedEngine", "max_queued_tasks": 256},
        "ScriptedEngine": {"deltas": ["Hel", "lo"], "slots": 4},
    }
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    tmp = tmp_path_factory.mktemp("fuzz")
    with running_server(tmp, config=config, environ={"PYTHONPATH": path}) as server:
        yield server


# --- Ollama's API, by hand ---------------------------------------------------------------------

#: Any JSON value, small.
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)


def field_of(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value: mostly a good one, sometimes anything."""
    return st.one_of(good, good, good, JUNK)


def shaped(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """An object of some of ``fields``, each good or junk, sometimes with an unknown one."""
    return st.fixed_dictionaries(
        {}, optional={name: field_of(value) for name, value in fields.items()} | {"extra": JUNK}
    )


NAMES = st.sampled_from([MODEL, "nope", "", MODEL.upper(), f"{MODEL}:latest", "a" * 600])
DURATIONS = st.one_of(
    st.sampled_from(["5m", "0", "-1", "1h30m", "10s", "", "forever", "1e400"]),
    st.integers(-5, 600),
    st.floats(allow_nan=True, allow_infinity=True),
)
OPTIONS = shaped(
    {
        "num_predict": st.integers(-3, 3),
        "temperature": st.floats(-1, 3),
        "top_p": st.floats(-1, 2),
        "top_k": st.integers(-2, 100),
        "seed": st.integers(-(2**70), 2**70),
        "stop": st.lists(st.text(max_size=5), max_size=6),
        "num_ctx": st.integers(-1, 10**9),
    }
)
FORMATS = st.one_of(
    st.sampled_from(["", "json", "xml"]),
    st.just({"type": "object", "properties": {"a": {"type": "string"}}}),
    st.just({"type": "object", "minLength": -1}),
)
GENERATING = {
    "model": NAMES,
    "stream": st.booleans(),
    "format": FORMATS,
    "options": OPTIONS,
    "keep_alive": DURATIONS,
    "think": st.sampled_from([True, False, "low", "high", "max"]),
}
MESSAGE = shaped(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool", "robot"]),
        "content": st.text(max_size=30),
        "images": st.lists(st.text(max_size=8), max_size=2),
        "tool_calls": st.lists(
            shaped({"function": shaped({"name": st.text(max_size=8), "arguments": JUNK})}),
            max_size=2,
        ),
        "tool_name": st.text(max_size=8),
    }
)
TOOL = shaped(
    {
        "type": st.sampled_from(["function", "other"]),
        "function": shaped(
            {"name": st.text(max_size=10), "parameters": st.just({"type": "object"}) | JUNK}
        ),
    }
)
BODIES: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "/api/chat": shaped(
        {
            **GENERATING,
            "messages": st.lists(MESSAGE, max_size=3),
            "tools": st.lists(TOOL, max_size=2),
        }
    ),
    "/api/generate": shaped(
        {
            **GENERATING,
            "prompt": st.text(max_size=40),
            "suffix": st.text(max_size=10),
            "system": st.text(max_size=10),
            "template": st.text(max_size=10),
            "raw": st.booleans(),
            "context": st.lists(st.integers(), max_size=3),
        }
    ),
    "/api/embed": shaped(
        {
            "model": NAMES,
            "input": st.text(max_size=10) | st.lists(st.text(max_size=10), max_size=3),
            "truncate": st.booleans(),
            "dimensions": st.integers(-1, 10),
            "keep_alive": DURATIONS,
        }
    ),
    "/api/embeddings": shaped({"model": NAMES, "prompt": st.text(max_size=10)}),
    "/api/show": shaped({"model": NAMES, "name": NAMES, "verbose": st.booleans()}),
    "/api/pull": shaped({"model": NAMES, "stream": st.booleans()}),
    "/api/delete": shaped({"model": NAMES}),
}
READS = ["/", "/api/version", "/api/tags", "/api/ps", "/api/nowhere"]


@st.composite
def ollama_requests(draw: st.DrawFn) -> tuple[str, str, bytes]:
    """A method, a path of Ollama's API and a body: a shaped JSON object (mostly), any JSON
    value, or bytes that are not JSON."""
    path = draw(st.sampled_from([*BODIES, *READS]))
    method = draw(st.sampled_from(["POST"] * 6 + ["GET", "DELETE", "PUT"]))
    if path in READS:
        method = draw(st.sampled_from(["GET"] * 4 + ["POST", "HEAD"]))
    kind = draw(st.integers(0, 9))
    if kind == 0:
        body = draw(st.binary(max_size=40) | st.sampled_from([b"{", b"\xff\xfe{}", b"[1e99999]"]))
    elif kind == 1:
        body = json.dumps(draw(JUNK)).encode()
    else:
        body = json.dumps(draw(BODIES.get(path, shaped({})))).encode()
    return method, path, body


@dataclass
class OllamaRun:
    """What the Ollama cases sent, and where a reply broke Ollama's shapes."""

    requests: int = 0
    by_status: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


def ollama_shape(reply: httpx.Response) -> None:
    """A reply in Ollama's shapes: an error is ``{"error": "..."}`` as JSON; a stream is one
    JSON object a line (an error last, if any)."""
    assert reply.status_code < 500, reply.status_code
    media_type = reply.headers.get("content-type", "").split(";")[0]
    if reply.request.method == "HEAD":  # no body to look at
        return
    if reply.status_code >= 400:
        assert media_type == "application/json", media_type
        assert set(reply.json()) == {"error"} and isinstance(reply.json()["error"], str)
        assert "Traceback" not in reply.text
        return
    if media_type == "application/x-ndjson":
        lines = [json.loads(line) for line in reply.text.splitlines()]
        assert lines and all(isinstance(line, dict) for line in lines), lines
        assert lines[-1].get("done") is True or set(lines[-1]) == {"error"}, lines[-1]
    elif media_type == "application/json":
        assert isinstance(reply.json(), dict), reply.text[:200]


def fuzz_ollama(client: httpx.Client, run: OllamaRun, batch: int) -> None:
    """One batch of Ollama cases."""

    @seed(batch)
    @settings(
        max_examples=OLLAMA_EXAMPLES,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    @given(request=ollama_requests())
    def send(request: tuple[str, str, bytes]) -> None:
        method, path, body = request
        reply = client.request(method, path, content=body if method != "GET" else None)
        run.requests += 1
        run.by_status[reply.status_code] += 1
        try:
            ollama_shape(reply)
        except (AssertionError, ValueError) as failure:
            run.failures.append(f"{method} {path} {body[:300]!r}\n→ {reply.status_code} "
                                f"{reply.text[:300]}\n{failure!r}")  # fmt: skip

    send()


# --- the batches --------------------------------------------------------------------------------


@dataclass
class Batches:
    """The whole run: schemathesis', Ollama's, and the normal requests after each batch."""

    openapi: FuzzRun
    ollama: OllamaRun
    #: After each batch: the status of a normal request of each dialect.
    after: list[dict[str, int]]

    @property
    def requests(self) -> int:
        return self.openapi.requests + self.ollama.requests


def normal_requests(lmsp: httpx.Client, ollama: httpx.Client) -> dict[str, int]:
    """A normal request of each dialect, and the status of its answer."""
    ask = {"model": MODEL, "input": "Hi", "max_output_tokens": 4}
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    completion = {"model": MODEL, "prompt": "Hi", "max_tokens": 4}
    ollama_chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": False}
    return {
        "responses": lmsp.post("/responses", json=ask).status_code,
        "chat": lmsp.post("/chat/completions", json=chat).status_code,
        "completions": lmsp.post("/completions", json=completion).status_code,
        "tasks": lmsp.post("/tasks", json={"type": "response", "request": ask}).status_code,
        "ollama": ollama.post("/api/chat", json=ollama_chat).status_code,
    }


@pytest.fixture(scope="module")
def batches(scripted_server: LiveServer) -> Batches:
    with scripted_server.client() as client:
        served: dict[str, Any] = client.get("/openapi.json").raise_for_status().json()
    operations = []
    for result in schemathesis.openapi.from_dict(served).get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    fuzzer = Fuzzer(scripted_server, served, model_calls=BATCHES * EXAMPLES)  # scripted: cheap
    started = time.monotonic()
    ollama = OllamaRun()
    after = []
    root = scripted_server.lmsp.removesuffix("v1") + "ollama"
    headers = {"Authorization": f"Bearer {scripted_server.token}"}
    with (
        scripted_server.client() as lmsp,
        httpx.Client(base_url=root, headers=headers, timeout=120) as ollama_client,
    ):
        for batch in range(1, BATCHES + 1):
            for operation in operations:
                for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                    fuzzer.operation(operation, mode, EXAMPLES, batch)
            fuzz_ollama(ollama_client, ollama, batch)
            after.append(normal_requests(lmsp, ollama_client))
        cancel_leftover_tasks(lmsp)
    fuzzer.run.seconds = time.monotonic() - started
    fuzzer.run.model_calls = sum(fuzzer.model_calls.values())
    run = Batches(fuzzer.run, ollama, after)
    statuses = dict(sorted(ollama.by_status.items()))
    print(f"\n{run.openapi.summary()}\nOllama: {ollama.requests} requests, {statuses}")
    return run


def test_every_dialect_gets_its_batches_and_never_a_5xx(batches: Batches) -> None:
    assert batches.requests >= MIN_REQUESTS, batches.requests
    statuses = batches.openapi.by_status + batches.ollama.by_status
    assert not [status for status in statuses if status >= 500], statuses
    assert {200, 400, 404} <= set(batches.ollama.by_status)
    assert batches.openapi.model_calls > 0 and {200, 202} <= set(batches.openapi.by_status)


def test_the_service_answers_a_normal_request_after_each_batch(batches: Batches) -> None:
    normal = {"responses": 200, "chat": 200, "completions": 200, "tasks": 202, "ollama": 200}
    assert batches.after == [normal] * BATCHES


def test_ollama_replies_keep_ollamas_shapes(batches: Batches) -> None:
    failures = batches.ollama.failures
    assert not failures, f"{len(failures)} failures; the first:\n{failures[0]}"


@pytest.mark.parametrize("check", [*CHECKS, "problem_document", "sse_stream"])
def test_openapi_check(batches: Batches, check: str) -> None:
    failures = batches.openapi.failures.get(check, [])
    assert not failures, f"{len(failures)} failures; the first:\n{failures[0]}"
