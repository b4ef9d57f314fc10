"""A PostgreSQL store that goes down and comes back (issue 26): while it is down, what needs it
is ``503 overloaded`` with ``Retry-After``, what does not is served; once it is back, nothing
stored before is lost and the service works as before, without a restart.

A real ``jupyter server`` with the bundled model, on the tests' PostgreSQL server, which the
test stops and starts again.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from lmsp_jupyter.service.store.interface import RETRY_AFTER_SECONDS
from tests.conftest import running_server
from tests.helpers import eventually
from tests.postgres import PostgresServer
from tests.server.helpers import ask, assert_problem, events, start


@pytest.fixture(autouse=True)
def _model(bundled_model_path: Path) -> None:
    """The server generates with the bundled model."""


def test_a_store_that_is_down_is_503_and_nothing_is_lost_once_it_is_back(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    config = {"TaskStore": {"store_url": postgres.new_database()}}
    with running_server(tmp_path, config=config) as server, server.client() as client:
        task = start(client, tokens=2)
        before = events(client, task["id"])
        ended = client.get(f"/tasks/{task['id']}").json()
        stored = client.post("/responses", json=ask(tokens=2, store=True))
        assert stored.status_code == 200, stored.text
        postgres.stop()
        try:
            for refused in (
                client.post("/tasks", json={"type": "response", "request": ask(tokens=2)}),
                client.get(f"/tasks/{task['id']}"),
                client.get(f"/responses/{stored.json()['id']}"),
            ):
                assert_problem(refused, 503, "overloaded")
                assert refused.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)
            assert client.get("/models").status_code == 200  # what needs no store is served
        finally:
            postgres.start()

        def answered() -> httpx.Response | None:
            reply = client.get(f"/tasks/{task['id']}")
            return reply if reply.status_code == 200 else None

        again = eventually(answered, what="the store back")
        assert again.json() == ended
        assert events(client, task["id"]) == before
        assert client.get(f"/responses/{stored.json()['id']}").json() == stored.json()
        after = start(client, tokens=2)
        assert events(client, after["id"])[-1].event in (
            "response.completed",
            "response.incomplete",
        )
