"""Retention, overload and restarts, each on a server of its own (real model)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL, LiveServer, Stores, running_server, start_server, stop_server
from tests.helpers import eventually
from tests.server.helpers import assert_problem, events, start, wait_for_events


@pytest.fixture
def short_retention(tmp_path: Path) -> Iterator[LiveServer]:
    config = {
        "TaskStore": {
            "event_retention_seconds": 1,
            "task_retention_seconds": 4,
            "purge_interval_seconds": 0.2,
        },
        "LmspApp": {"max_queued_tasks": 1},
        "LocalEngine": {"parallel_requests": 1},
    }
    with running_server(tmp_path, config=config) as server:
        yield server


def until_not_ok(client: httpx.Client, path: str) -> httpx.Response:
    """Poll ``GET path`` until it answers other than 200 (what has expired is gone)."""

    def not_ok() -> httpx.Response | None:
        response = client.get(path)
        return response if response.status_code != 200 else None

    return eventually(not_ok, interval=0.1, what=f"GET {path} no longer 200")


def test_events_expire_before_the_task_which_then_is_gone(short_retention: LiveServer) -> None:
    with short_retention.client() as client:
        task = start(client, tokens=2)
        received = events(client, task["id"])
        response = until_not_ok(client, f"/tasks/{task['id']}/events")
        assert_problem(response, 410, "event_history_expired")
        kept = client.get(f"/tasks/{task['id']}")
        assert kept.status_code == 200
        assert kept.json()["last_event_id"] == len(received)
        assert events(client, task["id"], params={"after": len(received)}) == []
        assert_problem(until_not_ok(client, f"/tasks/{task['id']}"), 404, "task_not_found")


def test_a_full_queue_is_overloaded_with_retry_after_for_tasks_and_direct_requests(
    short_retention: LiveServer,
) -> None:
    with short_retention.client() as client:
        running = start(client, prompt="Write a long story.", tokens=2000)
        wait_for_events(client, running["id"], 3)
        queued = start(client, tokens=2)
        body = {
            "type": "response",
            "request": {"model": MODEL, "input": "x", "max_output_tokens": 1},
        }
        response = client.post("/tasks", json=body)
        assert_problem(response, 503, "overloaded")
        assert response.headers["retry-after"] == "5"
        direct = client.post("/responses", json=body["request"])
        assert_problem(direct, 503, "overloaded")
        assert direct.headers["retry-after"] == "5"
        client.post(f"/tasks/{running['id']}/cancel")
        events(client, queued["id"])
        assert client.post("/tasks", json=body).status_code == 202


def test_a_killed_service_keeps_its_tasks_and_fails_the_running_one(
    tmp_path: Path, stores: Stores
) -> None:
    lease = {"lease_seconds": 3.0, "lease_renew_seconds": 0.5}  # the restart waits this out
    config = {"TaskStore": {"store_url": stores.new(), **lease}}
    server = start_server(tmp_path / "first", config=config)
    with server.client() as client:
        finished = start(client, tokens=4)
        finished_events = events(client, finished["id"])
        running = start(client, prompt="Write a long story.", tokens=3000)
        before = wait_for_events(client, running["id"], 8)
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()

    again = start_server(tmp_path / "second", config=config)
    try:
        with again.client() as client:
            assert events(client, finished["id"]) == finished_events

            def ended() -> dict[str, Any] | None:
                task: dict[str, Any] = client.get(f"/tasks/{running['id']}").json()
                return task if task["status"] != "in_progress" else None

            task = eventually(ended, what="the killed server's task ended")
            assert task["status"] == "failed"
            assert task["error"]["code"] == "service_restarted"
            assert task["result"]["status"] == "failed"
            replay = events(client, running["id"])
            assert [e.id for e in replay] == list(range(1, len(replay) + 1))
            assert len(replay) >= before["last_event_id"] + 1
            assert replay[-1].event == "response.failed"
            assert replay[-1].data["error"]["code"] == "service_restarted"
            assert sum(e.event.startswith("response.failed") for e in replay) == 1
            assert task["last_event_id"] == len(replay)
    finally:
        stop_server(again)
