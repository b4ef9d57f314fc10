"""Two Jupyter servers on one store, as a user's servers share the one under their Jupyter data
directory (issue 28) and service replicas share one PostgreSQL database (issue 26): each runs
its own tasks under a lease, neither fails the other's while it lives, a killed one's tasks are
failed at once (its process is gone), and both read, follow and cancel the same tasks.

Real ``jupyter server`` processes with the bundled model, a short lease renewed often; each test
on a SQLite file and on a PostgreSQL database.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from lmsp_jupyter.service.store import open_store
from tests.conftest import LiveServer, Stores, start_server, stop_server
from tests.helpers import eventually
from tests.server.helpers import ask, assert_problem, claimed_keys, events, start, wait_for_events

#: Longer than anything the tests do while a live server must keep its tasks; renewed often.
LEASE = {"lease_seconds": 8.0, "lease_renew_seconds": 0.5}
#: A lease no test outlives: what ends the work of a server holding it is its process's end.
KEPT = {"lease_seconds": 3600.0, "lease_renew_seconds": 0.5}
#: A task that runs until it is cancelled or its server dies: its budget takes minutes.
ENDLESS: dict[str, Any] = {"prompt": "Write a long story.", "tokens": 8000}
#: A short answer that ends by itself, ``completed``: its schema closes it.
COLOUR: dict[str, Any] = {
    "tokens": 200,
    "response_format": {
        "type": "json_schema",
        "json_schema": {
            "name": "colour",
            "schema": {
                "type": "object",
                "properties": {"colour": {"type": "string", "maxLength": 12}},
                "required": ["colour"],
                "additionalProperties": False,
            },
        },
    },
}


@pytest.fixture(autouse=True)
def _model(bundled_model_path: Path) -> None:
    """The servers generate with the bundled model."""


@pytest.fixture
def store(stores: Stores) -> str:
    """The store the servers of a test share: a SQLite file, then a PostgreSQL database."""
    return stores.new()


@contextlib.contextmanager
def shared(
    store: str, tmp_path: Path, name: str, *, lease: dict[str, float] = LEASE, slots: int = 1
) -> Iterator[LiveServer]:
    """A server named ``name`` (its data directory) on the store ``store``; ``slots`` model
    slots."""
    config = {
        "LmspApp": {"store_url": store, **lease},
        "LocalEngine": {"parallel_requests": slots},
    }
    server = start_server(tmp_path / name, config=config)
    try:
        yield server
    finally:
        stop_server(server)


def lease_of(store: str, *, task_id: str | None = None) -> dict[str, Any]:
    """The lease of the server running ``task_id`` (without: of the newest server)."""
    database = open_store(store)
    try:
        if task_id is None:
            row = database.fetchone("SELECT * FROM leases ORDER BY started_at DESC")
        else:
            row = database.fetchone(
                "SELECT leases.* FROM leases JOIN tasks ON tasks.holder = leases.holder"
                " WHERE tasks.id = ?",
                (task_id,),
            )
        assert row is not None
        return {name: row[name] for name in ("holder", "started_at", "expires_at")}
    finally:
        database.close()


def renewed_twice(store: str) -> None:
    """Wait until the newest server has renewed its lease twice (each time it also ends what
    gone servers held)."""
    first = lease_of(store)
    later = first["expires_at"] + 2 * LEASE["lease_renew_seconds"]
    eventually(lambda: lease_of(store)["expires_at"] >= later, what="the new server renewing twice")


def status(client: httpx.Client, task_id: str) -> str:
    task: dict[str, Any] = client.get(f"/tasks/{task_id}").json()
    return str(task["status"])


def final_task(client: httpx.Client, task_id: str) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        task: dict[str, Any] = client.get(f"/tasks/{task_id}").json()
        return task if task["status"] not in ("queued", "in_progress") else None

    return eventually(final, what=f"task {task_id} final")


def test_a_running_task_survives_another_servers_start_and_they_complete(
    store: str, tmp_path: Path
) -> None:
    with shared(store, tmp_path, "a") as first, first.client() as a:
        running = start(a, **ENDLESS)
        queued = start(a, **COLOUR)  # behind it: it cannot start before the first ends
        wait_for_events(a, running["id"], 3)
        with shared(store, tmp_path, "b") as second, second.client() as b:
            renewed_twice(store)  # its start-up recovery and two more have run
            for client in (a, b):
                assert status(client, running["id"]) == "in_progress"
                assert status(client, queued["id"]) == "queued"
            b.post(f"/tasks/{running['id']}/cancel")  # asked of B, stopped by A
            assert final_task(b, running["id"])["status"] == "cancelled"
            done = final_task(b, queued["id"])
            assert done["status"] == "completed"
            assert a.get(f"/tasks/{queued['id']}").json() == done
            replay = events(b, queued["id"])
            assert [e.id for e in replay] == list(range(1, len(replay) + 1))
            assert replay[-1].event == "response.completed"


def test_a_killed_servers_work_ends_at_its_restart_and_a_live_servers_is_untouched(
    store: str, tmp_path: Path
) -> None:
    """SIGKILL mid-task, restart on the same data directory: the task is failed at once (its
    lease, an hour long, is not what ends it: its process is gone), its events replay, a keyed
    stream the kill cut runs again under its key; the other server's task and key stay."""
    body = ask(**ENDLESS, stream=True)
    with (
        shared(store, tmp_path, "b", lease=KEPT, slots=2) as second,
        second.client() as b,
        ThreadPoolExecutor(1) as pool,
    ):
        kept = start(b, **ENDLESS)
        wait_for_events(b, kept["id"], 3)
        with keyed_stream(b, "b-key", body):
            with shared(store, tmp_path, "a", lease=KEPT, slots=2) as first, first.client() as a:
                task = start(a, **ENDLESS)
                wait_for_events(a, task["id"], 3)
                follower = pool.submit(events, b, task["id"])  # followed on B from the start
                with keyed_stream(a, "a-key", body):
                    first.process.send_signal(signal.SIGKILL)
                    first.process.wait()
            with shared(store, tmp_path, "a", lease=KEPT, slots=2) as again, again.client() as a:

                def failed() -> dict[str, Any] | None:
                    state: dict[str, Any] = a.get(f"/tasks/{task['id']}").json()
                    return state if state["status"] == "failed" else None

                ended = eventually(failed, within=2, interval=0.1, what="the task failed")
                assert ended["error"]["code"] == "service_restarted"
                replay = events(a, task["id"])
                assert [e.id for e in replay] == list(range(1, len(replay) + 1))
                assert [e.event for e in replay].count("response.failed") == 1
                assert replay[-1].event == "response.failed"
                assert ended["last_event_id"] == len(replay)
                assert follower.result() == replay  # every event once, across the kill
                headers = {"Idempotency-Key": "a-key"}
                with a.stream("POST", "/responses", json=body, headers=headers) as retried:
                    assert retried.status_code == 200  # runs: not 409, not a replay
                    assert "idempotent-replayed" not in retried.headers
                    assert next(retried.iter_lines()).startswith(("retry:", "id:", "event:"))
                renewed_twice(store)  # the restarted server's renewals leave B's work alone
                assert status(b, kept["id"]) == "in_progress"
                assert "b-key" in claimed_keys(store)
                in_flight = a.post("/responses", json=body, headers={"Idempotency-Key": "b-key"})
                assert_problem(in_flight, 409, "idempotency_in_progress")
        b.post(f"/tasks/{kept['id']}/cancel")
        assert final_task(b, kept["id"])["status"] == "cancelled"


def test_both_servers_read_the_same_tasks_and_keys(store: str, tmp_path: Path) -> None:
    with (
        shared(store, tmp_path, "a") as first,
        shared(store, tmp_path, "b") as second,
        first.client() as a,
        second.client() as b,
    ):
        key = {"Idempotency-Key": "shared-key"}
        body = {"type": "response", "request": ask(tokens=2, metadata={"cell": "c1"})}
        made = a.post("/tasks", json=body, headers=key)
        assert made.status_code == 202, made.text
        again = b.post("/tasks", json=body, headers=key)  # the same task, not a second one
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["id"] == made.json()["id"]
        mine = start(b, tokens=2)
        key_in_flight_is_claimed_on_the_other(a, b, store)
        running = start(a, **ENDLESS)
        wait_for_events(a, running["id"], 3)
        listings = [c.get("/tasks").json()["data"] for c in (a, b)]
        assert [t["id"] for t in listings[0]] == [t["id"] for t in listings[1]]
        assert {t["id"] for t in listings[0]} == {made.json()["id"], mine["id"], running["id"]}
        by_cell = [c.get("/tasks", params={"metadata.cell": "c1"}).json()["data"] for c in (a, b)]
        assert [t["id"] for t in by_cell[0]] == [t["id"] for t in by_cell[1]] == [made.json()["id"]]
        response = b.get(f"/responses/{running['response_id']}").json()
        assert (response["id"], response["status"]) == (running["response_id"], "in_progress")
        with ThreadPoolExecutor(1) as pool:
            followed = pool.submit(events, b, running["id"])  # live on B, from A's store
            wait_for_events(b, running["id"], 6)
            b.post(f"/tasks/{running['id']}/cancel")
            assert followed.result() == events(a, running["id"])
        assert followed.result()[-1].event == "response.cancelled"
        final_task(b, running["id"])
        for task_id in (made.json()["id"], mine["id"], running["id"]):
            final = final_task(a, task_id)
            assert b.get(f"/tasks/{task_id}").json() == final
            assert events(a, task_id) == events(b, task_id)


def key_in_flight_is_claimed_on_the_other(a: httpx.Client, b: httpx.Client, store: str) -> None:
    """A stream under a key runs on ``a``: the same key on ``b`` is in progress there."""
    key = {"Idempotency-Key": "streaming-key"}
    body = ask(**ENDLESS, stream=True)
    with keyed_stream(a, "streaming-key", body):
        eventually(lambda: "streaming-key" in claimed_keys(store))
        assert_problem(b.post("/responses", json=body, headers=key), 409, "idempotency_in_progress")
    eventually(lambda: "streaming-key" not in claimed_keys(store), what="the key freed")


@contextlib.contextmanager
def keyed_stream(client: httpx.Client, key: str, body: dict[str, Any]) -> Iterator[None]:
    """A stream under ``key``, read on a thread while the block runs (from its first line
    in), then left: the stream stops and its key is freed. A server killed meanwhile cuts it."""
    reading, leave = threading.Event(), threading.Event()

    def read() -> None:
        headers = {"Idempotency-Key": key}
        with (
            contextlib.suppress(httpx.TransportError),
            client.stream("POST", "/responses", json=body, headers=headers) as response,
        ):
            for _ in response.iter_lines():
                reading.set()
                if leave.is_set():
                    return

    thread = threading.Thread(target=read)
    thread.start()
    try:
        eventually(reading.is_set, what=f"the stream under {key} running")
        yield
    finally:
        leave.set()
        thread.join()
