"""What the tests of the server suite share: requests for the bundled model, a strict reader of
the SSE streams they receive, problem documents, tasks followed over HTTP, the idempotency keys
of a store, and the configuration and apps of the in-process server (``conftest.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from traitlets.config import Config

from lmsp_jupyter.engine.fim import FimTokens, raw_prompt_tokens
from lmsp_jupyter.engine.generation import StopReason
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer
from lmsp_jupyter.engine.local.worker import ModelWorker
from lmsp_jupyter.server.app import LmspApp
from lmsp_jupyter.service.store import open_store
from tests.conftest import FIM_IDS, MODEL
from tests.doubles import ScriptedEngine
from tests.helpers import eventually, eventually_async


def ask(prompt: str = "Name a colour.", tokens: int = 8, **fields: Any) -> dict[str, Any]:
    """A small, deterministic request for the bundled model (``fields`` override)."""
    return {
        "model": MODEL,
        "input": prompt,
        "temperature": 0,
        "max_output_tokens": tokens,
        **fields,
    }


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    """``response`` is a problem document with ``status`` and ``code``, and no traceback."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, object] = response.json()
    assert problem["code"] == code
    assert problem["status"] == status
    assert "Traceback" not in response.text
    return problem


@dataclass
class Event:
    """One server-sent event."""

    id: int
    event: str
    data: dict[str, Any]


def parse_sse(lines: Iterable[str]) -> tuple[list[Event], list[str]]:
    """Events and comments of a stream; every event must have an id, a name and one data line.

    No frame goes without data (11.4): a blank line only ever ends an event, the first event's
    frame carries ``retry: 2000`` (so browsers reconnect) and no other frame does, and a comment
    (keep-alive) is a line alone.
    """
    events: list[Event] = []
    comments: list[str] = []
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            assert fields, "a blank line that ends no event"
            if not events:
                assert fields.pop("retry", None) == "2000", "the first event must carry retry"
            assert set(fields) == {"id", "event", "data"}, fields
            events.append(Event(int(fields["id"]), fields["event"], json.loads(fields["data"])))
            fields = {}
        elif line.startswith(":"):
            assert not fields, "a comment inside an event"
            comments.append(line)
        else:
            name, _, value = line.partition(": ")
            assert name not in fields, f"repeated field {name}"
            fields[name] = value
    assert not fields, "stream ended inside an event"
    return events, comments


def stream(client: httpx.Client, body: dict[str, Any]) -> tuple[httpx.Response, list[Event]]:
    """``POST /responses`` streamed: the response and its events (none when it is not 200)."""
    with client.stream("POST", "/responses", json={**body, "stream": True}) as response:
        if response.status_code != 200:
            response.read()
            return response, []
        events, _ = parse_sse(response.iter_lines())
    return response, events


def start(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    """Create a task for ``ask(**fields)``; return the task object."""
    response = client.post("/tasks", json={"type": "response", "request": ask(**fields)})
    assert response.status_code == 202, response.text
    task: dict[str, Any] = response.json()
    return task


def events(client: httpx.Client, task_id: str, **kwargs: Any) -> list[Event]:
    """All the events of a task, read until the stream ends."""
    with client.stream("GET", f"/tasks/{task_id}/events", **kwargs) as response:
        assert response.status_code == 200, response.read()
        received, _ = parse_sse(response.iter_lines())
    return received


def wait_for_events(client: httpx.Client, task_id: str, count: int) -> dict[str, Any]:
    """Poll until the task has at least ``count`` events; return the task."""

    def task_with_enough() -> dict[str, Any] | None:
        task: dict[str, Any] = client.get(f"/tasks/{task_id}").json()
        return task if task["last_event_id"] >= count else None

    return eventually(task_with_enough, what=f"task {task_id} with {count} events")


def claimed_keys(store_url: str) -> set[str]:
    """The idempotency keys whose first attempt is running, as the store has them."""
    store = open_store(store_url)
    try:
        return {
            row["key"] for row in store.fetchall("SELECT key FROM idempotency WHERE status IS NULL")
        }
    finally:
        store.close()


def server_config(request: pytest.FixtureRequest, **lmsp: Any) -> Config:
    """The in-process server's config: the extension, none of the machine's model stores, and
    the ``lmsp`` settings of ``LmspApp``.

    A test marked ``@pytest.mark.script({"deltas": [...], "delay": ..., "fail_after": ...},
    ...)`` has its models served by ``ScriptedEngine`` (``LmspApp.engine_class``) playing those
    scripts, one per generation in turn, the last one from then on.
    """
    config = Config(
        {
            "ServerApp": {"jpserver_extensions": {"lmsp_jupyter": True}},
            "LmspApp": {"ollama_dir": "", "huggingface_cache_dir": "", **lmsp},
        }
    )
    marker = request.node.get_closest_marker("script")
    if marker is not None:
        first, *then = marker.args
        config.LmspApp.engine_class = ScriptedEngine
        config.ScriptedEngine = Config({**first, "then": then})
    return config


def lmsp_app(serverapp: Any) -> LmspApp:
    """The extension app of a running server."""
    (app,) = serverapp.extension_manager.extension_apps["lmsp_jupyter"]
    assert isinstance(app, LmspApp)
    return app


def scripted_engine(serverapp: Any) -> ScriptedEngine:
    """The scripted engine of a server whose test is marked ``script``."""
    engine = lmsp_app(serverapp).engine.local
    assert isinstance(engine, ScriptedEngine)
    return engine


def record_finishes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[StopReason, int]]:
    """Every sequence the model workers finish from now on: why, and after how many tokens."""
    finished: list[tuple[StopReason, int]] = []
    finish = ModelWorker._finish

    def recording(self: ModelWorker, sequence: Any, reason: StopReason, flush: bool = True) -> None:
        finished.append((reason, sequence.generated))
        finish(self, sequence, reason, flush)

    monkeypatch.setattr(ModelWorker, "_finish", recording)
    return finished


#: The tokens a request asks for that its client leaves: far more than it has by then.
LEFT_LIMIT = 4000


async def leave_mid_stream(
    lmsp: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    body: dict[str, Any],
    counted: Callable[[str], bool] = lambda line: True,
) -> None:
    """Stream ``body`` (asking for ``LEFT_LIMIT`` tokens) to ``url`` and leave after three of
    its lines that are ``counted``; then wait until the model workers finished a sequence: the
    only one, cancelled before its limit."""
    finished = record_finishes(monkeypatch)
    seen = 0
    async with lmsp.stream("POST", url, json=body) as response:
        async for line in response.aiter_lines():
            seen += counted(line)
            if seen == 3:
                break

    async def generation_ended() -> bool:
        return bool(finished)

    await eventually_async(generation_ended, interval=0.1, what="the generation ended")
    [(reason, generated)] = finished
    assert reason == "cancelled"
    assert generated < LEFT_LIMIT


def fim_prompt_lengths(fim_model_path: Path, prefix: str, suffix: str) -> tuple[int, int]:
    """The prompt tokens of the FIM copy of the bundled model filling the gap between
    ``prefix`` and ``suffix``, and of it continuing ``prefix`` alone, by its own tokenizer."""
    tokenizer = LlamaTokenizer(fim_model_path)
    try:
        filled = raw_prompt_tokens(
            tokenizer.tokenize, prefix, suffix, bos=tokenizer.bos, fim=FimTokens(*FIM_IDS)
        )
        return len(filled), len([tokenizer.bos, *tokenizer.tokenize(prefix)])
    finally:
        tokenizer.close()
