"""Every dialect fuzzed in CI-sized batches against a live server whose models are the scripted
engine (each answer is two deltas, so ten thousand requests stay cheap), two batches at a time,
each in a worker process of its own, on one server.

Each batch sends schemathesis' cases of every operation of the served OpenAPI document (LMSP,
OpenAI's Responses fields, Chat Completions, Completions, embeddings, usage; positive and
negative, a new seed each batch), hand-made Hypothesis cases of Ollama's API (its shapes
with good and junk values in every field, bodies that are not JSON, wrong methods and paths)
and of Anthropic's Messages API (spoiled bodies, tests/server/fuzzing.py). Every reply: never
a 5xx; an LMSP error a problem document with a code of the spec's table and everything else as
the document says (tests/server/fuzzing.py); an Ollama error its ``{"error": "..."}`` and a
stream one JSON object a line; an Anthropic error its ``{"type": "error", "error": {...}}``.
After each batch the server answers a normal request of each dialect. The bundled model gets
its own slice of the same checks: tests/server/test_openapi.py, tests/server/test_anthropic_fuzz.py.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
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
from tests.server.fuzzing import (
    ANTHROPIC_PATHS,
    ANTHROPIC_VALID,
    CHECKS,
    Fuzzer,
    FuzzRun,
    anthropic_shape,
    cancel_leftover_tasks,
    spoiled_anthropic,
)

#: Batches run (``LMSP_FUZZ_BATCHES`` for more), each with a seed of its own, ``WORKERS`` at a
#: time: cases per operation and generation mode in each (the OpenAPI document has 18
#: operations: 36 labels, 900 cases), and Ollama and Anthropic cases per batch: 1,600 requests.
BATCHES = int(os.environ.get("LMSP_FUZZ_BATCHES", "6"))
WORKERS = 2
EXAMPLES = 25
OLLAMA_EXAMPLES = 400
ANTHROPIC_EXAMPLES = 300
#: What the batches' requests add up to, at least.
MIN_REQUESTS = BATCHES * 1600

#: The batches run in the first test's setup: more than pytest's default ten minutes on a busy
#: machine.
pytestmark = pytest.mark.timeout(1800)


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
class HandRun:
    """What the hand-made cases of one dialect sent, and where a reply broke its shapes."""

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


def fuzz_ollama(client: httpx.Client, run: HandRun, batch: int) -> None:
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


# --- Anthropic's API, by hand (tests/server/fuzzing.py) ----------------------------------------


def fuzz_anthropic(client: httpx.Client, run: HandRun, batch: int) -> None:
    """One batch of Anthropic cases: spoiled Messages API bodies."""

    @seed(batch)
    @settings(
        max_examples=ANTHROPIC_EXAMPLES,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    @given(body=spoiled_anthropic(), path=ANTHROPIC_PATHS)
    def send(body: dict[str, Any], path: str) -> None:
        reply = client.post(path, json=body)
        run.requests += 1
        run.by_status[reply.status_code] += 1
        if wrong := anthropic_shape(reply):
            run.failures.append(f"{path} {json.dumps(body)[:300]} {wrong}")

    send()


# --- the batches --------------------------------------------------------------------------------


@dataclass
class Batches:
    """The whole run: schemathesis', Ollama's, Anthropic's, and the normal requests after each
    batch."""

    openapi: FuzzRun
    ollama: HandRun
    anthropic: HandRun
    #: After each batch: the status of a normal request of each dialect.
    after: list[dict[str, int]]

    @property
    def requests(self) -> int:
        return self.openapi.requests + self.ollama.requests + self.anthropic.requests

    def add(self, other: Batches) -> None:
        """Count ``other``'s requests, failures and normal requests in this run's."""
        self.openapi.add(other.openapi)
        for mine, theirs in ((self.ollama, other.ollama), (self.anthropic, other.anthropic)):
            mine.requests += theirs.requests
            mine.by_status += theirs.by_status
            mine.failures += theirs.failures
        self.after += other.after


@dataclass
class Clients:
    """The scripted server's clients: LMSP (and OpenAI's), Ollama's, Anthropic's."""

    lmsp: httpx.Client
    ollama: httpx.Client
    anthropic: httpx.Client


def normal_requests(clients: Clients) -> dict[str, int]:
    """A normal request of each dialect, and the status of its answer."""
    ask = {"model": MODEL, "input": "Hi", "max_output_tokens": 4}
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    completion = {"model": MODEL, "prompt": "Hi", "max_tokens": 4}
    ollama_chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": False}
    lmsp = clients.lmsp
    return {
        "responses": lmsp.post("/responses", json=ask).status_code,
        "chat": lmsp.post("/chat/completions", json=chat).status_code,
        "completions": lmsp.post("/completions", json=completion).status_code,
        "tasks": lmsp.post("/tasks", json={"type": "response", "request": ask}).status_code,
        "ollama": clients.ollama.post("/api/chat", json=ollama_chat).status_code,
        "anthropic": clients.anthropic.post("/messages", json=ANTHROPIC_VALID).status_code,
    }


@contextlib.contextmanager
def clients_of(root: str, token: str) -> Iterator[Clients]:
    """Clients of every dialect of the server at ``root``, each keeping its connections."""
    bearer = {"Authorization": f"Bearer {token}"}
    anthropic = {"x-api-key": token, "anthropic-version": "2023-06-01"}
    with (
        httpx.Client(base_url=f"{root}lmsp/v1", headers=bearer, timeout=120) as lmsp,
        httpx.Client(base_url=f"{root}lmsp/ollama", headers=bearer, timeout=120) as ollama,
        httpx.Client(base_url=f"{root}lmsp/anthropic/v1", headers=anthropic, timeout=120) as claude,
    ):
        yield Clients(lmsp, ollama, claude)


def run_batch(root: str, token: str, document: dict[str, Any], batch: int) -> Batches:
    """One batch against the server at ``root`` (in a worker process of its own): every
    operation of ``document`` in both modes, the Ollama and the Anthropic cases, then a normal
    request of each dialect."""
    operations = []
    for result in schemathesis.openapi.from_dict(document).get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    ollama, anthropic = HandRun(), HandRun()
    began = time.monotonic()
    with (
        contextlib.closing(
            Fuzzer(f"{root}lmsp/v1", token, model_calls=EXAMPLES, decodes_constraints=False)
        ) as fuzzer,
        clients_of(root, token) as clients,
    ):
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                fuzzer.operation(operation, mode, EXAMPLES, batch)
        fuzz_ollama(clients.ollama, ollama, batch)
        fuzz_anthropic(clients.anthropic, anthropic, batch)
        after = normal_requests(clients)
    fuzzer.run.model_calls = sum(fuzzer.model_calls.values())
    fuzzer.run.seconds = time.monotonic() - began
    return Batches(fuzzer.run, ollama, anthropic, [after])


@pytest.fixture(scope="module")
def batches(scripted_server: LiveServer) -> Batches:
    """``BATCHES`` batches, ``WORKERS`` at a time, each in a worker process of its own (the
    cases' generation and checks take more than the server's answers)."""
    with scripted_server.client() as client:
        served: dict[str, Any] = client.get("/openapi.json").raise_for_status().json()
    started, cpu = time.monotonic(), cpu_seconds(scripted_server)
    run = Batches(FuzzRun(), HandRun(), HandRun(), [])
    spawn = multiprocessing.get_context("spawn")  # a fork would copy this process's threads
    with ProcessPoolExecutor(WORKERS, mp_context=spawn) as pool:
        root, token = scripted_server.root, scripted_server.token
        done = [
            pool.submit(run_batch, root, token, served, batch) for batch in range(1, BATCHES + 1)
        ]
        for batch in done:
            run.add(batch.result())
    with scripted_server.client() as client:
        cancel_leftover_tasks(client)
    run.openapi.seconds = time.monotonic() - started
    server_cpu = cpu_seconds(scripted_server) - cpu
    print(
        f"\n{BATCHES} batches, {WORKERS} at a time: {run.requests} requests in "
        f"{run.openapi.seconds:.0f} s (the server's CPU: {server_cpu:.0f} s)\n"
        f"{run.openapi.summary()}\n"
        f"Ollama: {run.ollama.requests} requests, {dict(sorted(run.ollama.by_status.items()))}\n"
        f"Anthropic: {run.anthropic.requests} requests, "
        f"{dict(sorted(run.anthropic.by_status.items()))}"
    )
    return run


def cpu_seconds(server: LiveServer) -> float:
    """The CPU time the server's process has used so far."""
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_every_dialect_gets_its_batches_and_never_a_5xx(batches: Batches) -> None:
    assert batches.requests >= MIN_REQUESTS, batches.requests
    statuses = batches.openapi.by_status + batches.ollama.by_status + batches.anthropic.by_status
    assert not [status for status in statuses if status >= 500], statuses
    assert {200, 400, 404} <= set(batches.ollama.by_status)
    assert {200, 400} <= set(batches.anthropic.by_status)
    assert batches.openapi.model_calls > 0 and {200, 202} <= set(batches.openapi.by_status)


def test_the_service_answers_a_normal_request_after_each_batch(batches: Batches) -> None:
    normal = {
        "responses": 200,
        "chat": 200,
        "completions": 200,
        "tasks": 202,
        "ollama": 200,
        "anthropic": 200,
    }
    assert batches.after == [normal] * BATCHES


@pytest.mark.parametrize("dialect", ["ollama", "anthropic"])
def test_hand_made_cases_get_replies_in_their_dialects_shapes(
    batches: Batches, dialect: str
) -> None:
    run: HandRun = getattr(batches, dialect)
    assert run.requests > 0
    assert not run.failures, f"{len(run.failures)} failures; the first:\n{run.failures[0]}"


@pytest.mark.parametrize("check", [*CHECKS, "problem_document", "sse_stream"])
def test_openapi_check(batches: Batches, check: str) -> None:
    failures = batches.openapi.failures.get(check, [])
    assert not failures, f"{len(failures)} failures; the first:\n{failures[0]}"
