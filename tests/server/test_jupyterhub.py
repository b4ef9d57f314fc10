"""The service under a real JupyterHub (the dummy authenticator, configurable-http-proxy from
npm), on the bundled model: users' hub tokens through the hub's proxy; each user lists and asks
models but loads and unloads none, and reaches only its own tasks; an admin (hub role with
custom:lmsp:admin) loads and unloads, and reaches all; the limits answer 429; the usage per user
adds up to what the responses reported."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lmsp_jupyter.client import LmspClient
from tests.conftest import MODEL
from tests.helpers import eventually
from tests.hub_service import Hub, running_hub
from tests.server.helpers import assert_problem, parse_sse

pytestmark = pytest.mark.usefixtures("bundled_model_path")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(
        tmp_path_factory.mktemp("hub"),
        users=["alice", "bob", "root"],
        admins=["root"],
        service_args=["--LmspApp.owner_max_requests=1", "--LmspApp.owner_max_tasks=1"],
    ) as running:
        yield running


@pytest.fixture(scope="module")
def tokens(hub: Hub) -> dict[str, str]:
    """Each user's hub token, with the scopes a spawned server's token gets."""
    return {
        "alice": hub.token("alice"),
        "bob": hub.token("bob"),
        "root": hub.token("root", admin=True),
    }


@pytest.fixture(scope="module")
def users(hub: Hub, tokens: dict[str, str]) -> Iterator[dict[str, httpx.Client]]:
    clients = {
        name: httpx.Client(
            base_url=hub.lmsp, headers={"Authorization": f"Bearer {token}"}, timeout=120
        )
        for name, token in tokens.items()
    }
    yield clients
    for client in clients.values():
        client.close()


def ask(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": "Name a colour.", "max_output_tokens": 4, **fields}


def finished_task(client: httpx.Client) -> dict[str, Any]:
    created = client.post("/tasks", json={"type": "response", "request": ask()})
    assert created.status_code == 202, created.text
    task_id = created.json()["id"]
    with client.stream("GET", f"/tasks/{task_id}/events") as response:
        events, _ = parse_sse(list(response.iter_lines()))
    assert events[-1].event in ("response.completed", "response.incomplete")
    task: dict[str, Any] = client.get(f"/tasks/{task_id}").json()
    return task


def test_without_a_hub_token_the_service_answers_401(hub: Hub) -> None:
    assert_problem(httpx.get(f"{hub.lmsp}/models"), 401, "unauthorized")
    wrong = httpx.get(f"{hub.lmsp}/models", headers={"Authorization": "Bearer nope"})
    assert_problem(wrong, 401, "unauthorized")


def test_each_user_reaches_only_its_own_tasks_and_the_admin_all(
    users: dict[str, httpx.Client],
) -> None:
    alice, bob, root = users["alice"], users["bob"], users["root"]
    task = finished_task(alice)
    path = f"/tasks/{task['id']}"
    assert_problem(bob.get(path), 404, "task_not_found")
    assert_problem(bob.get(f"{path}/events"), 404, "task_not_found")
    assert_problem(bob.post(f"{path}/cancel"), 404, "task_not_found")
    assert_problem(bob.get(f"/responses/{task['response_id']}"), 404, "response_not_found")
    assert root.get(path).json() == task
    assert root.post(f"{path}/cancel").json() == task  # a final task stays as it is
    with root.stream("GET", f"{path}/events") as response:
        events, _ = parse_sse(list(response.iter_lines()))
    assert events[-1].data["response"] == task["result"]


def test_a_user_may_not_load_or_unload_models_and_the_admin_may(
    users: dict[str, httpx.Client],
) -> None:
    alice, root = users["alice"], users["root"]
    assert MODEL in [model["id"] for model in alice.get("/models").json()["data"]]
    for action in ("load", "unload"):
        refused = alice.post(f"/models/{MODEL}/{action}")
        assert_problem(refused, 403, "insufficient_scope")
        assert 'scope="models:write"' in refused.headers["WWW-Authenticate"]
    assert root.post(f"/models/{MODEL}/unload").json()["status"] == "available"
    assert root.post(f"/models/{MODEL}/load").json()["status"] == "loaded"
    assert alice.get(f"/models/{MODEL}").json()["status"] == "loaded"


def test_a_user_over_its_limit_gets_429_with_retry_after(users: dict[str, httpx.Client]) -> None:
    alice, bob = users["alice"], users["bob"]
    long = ask(input="Write a long story.", max_output_tokens=48, stream=True)
    with alice.stream("POST", "/responses", json=long) as first:
        lines = first.iter_lines()
        assert next(line for line in lines if line.startswith("event:"))
        second = alice.post("/responses", json=ask())
        assert_problem(second, 429, "rate_limited")
        assert int(second.headers["Retry-After"]) > 0
        assert bob.post("/responses", json=ask()).status_code == 200
        rest = [line for line in lines if line.startswith("event:")]  # read to its end
        assert rest[-1] in ("event: response.completed", "event: response.incomplete")

    def answered() -> bool:  # the first request's slot is freed as its handler returns
        reply = alice.post("/responses", json=ask())
        assert reply.status_code in (200, 429), reply.text
        return reply.status_code == 200

    eventually(answered, what="alice's next request answered after her stream ended")


def test_usage_per_user_adds_up(users: dict[str, httpx.Client]) -> None:
    before = {
        row["owner"]: row for row in users["root"].get("/x-lmsp-jupyter/usage").json()["data"]
    }
    reported: dict[str, list[dict[str, int]]] = {"alice": [], "bob": []}
    for name in ("alice", "alice", "bob"):
        reported[name].append(users[name].post("/responses", json=ask()).json()["usage"])
    reported["bob"].append(finished_task(users["bob"])["result"]["usage"])
    everyone = {
        row["owner"]: row for row in users["root"].get("/x-lmsp-jupyter/usage").json()["data"]
    }
    for name, usages in reported.items():
        owner = f"hub:{name}"
        (own,) = users[name].get("/x-lmsp-jupyter/usage").json()["data"]
        assert own == everyone[owner]
        earlier = before.get(owner, {"responses": 0, "input_tokens": 0, "output_tokens": 0})
        assert own["responses"] - earlier["responses"] == len(usages)
        for field in ("input_tokens", "output_tokens"):
            assert own[field] - earlier[field] == sum(usage[field] for usage in usages)


def test_the_service_is_reached_directly_only_with_a_hub_token(hub: Hub, tmp_path: Path) -> None:
    assert_problem(
        httpx.get(f"{hub.service_url}/services/lmsp/lmsp/v1/models"), 401, "unauthorized"
    )


def test_a_users_client_finds_the_hub_service_from_what_the_spawner_sets(
    hub: Hub,
    tokens: dict[str, str],
    users: dict[str, httpx.Client],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a kernel in alice's server does: $LMSP_HUB_SERVICE_URL (c.Spawner.environment) with
    her server's $JUPYTERHUB_API_TOKEN, before the $LMSP_URL of her own server's extension."""
    monkeypatch.setenv("LMSP_HUB_SERVICE_URL", hub.lmsp)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", tokens["alice"])
    monkeypatch.setenv("LMSP_URL", "http://127.0.0.1:9/lmsp/v1")
    with LmspClient() as client:
        assert client.base_url == hub.lmsp
        task = client.create_task(ask())
        assert users["alice"].get(f"/tasks/{task.id}").status_code == 200
        assert_problem(users["bob"].get(f"/tasks/{task.id}"), 404, "task_not_found")
        assert list(client.task_events(task.id))[-1].is_final


@pytest.fixture(scope="module")
def servers(hub: Hub) -> Iterator[dict[str, httpx.Client]]:
    """Alice's and Bob's own servers, spawned by the hub, each reached with a token of its user
    that may use that server (as the user's browser session may)."""
    clients = {}
    try:
        for name in ("alice", "bob"):
            url = hub.spawn(name)
            token = hub.token(name, scopes=[f"access:servers!user={name}"])
            clients[name] = httpx.Client(
                base_url=f"{url}lmsp/v1", headers={"Authorization": f"token {token}"}, timeout=120
            )
        yield clients
    finally:
        for client in clients.values():
            client.close()
        for name in ("alice", "bob"):
            hub.stop(name)


def test_users_servers_ask_through_the_hub_service_each_its_own(
    servers: dict[str, httpx.Client], users: dict[str, httpx.Client]
) -> None:
    """A user's server runs no model: its LMSP routes (what the lab extension's side panel,
    answer views and inline completions call) reach the hub service as its user."""
    assert servers["alice"].get("/models").json() == users["alice"].get("/models").json()
    tasks = {name: finished_task(servers[name]) for name in ("alice", "bob")}
    for name, other in (("alice", "bob"), ("bob", "alice")):
        path = f"/tasks/{tasks[name]['id']}"
        assert users[name].get(path).json() == tasks[name]  # hub:<name>'s, in the hub service
        assert servers[name].get(path).json() == tasks[name]
        assert_problem(servers[other].get(path), 404, "task_not_found")
        assert_problem(servers[other].get(f"{path}/events"), 404, "task_not_found")
        assert_problem(servers[other].post(f"{path}/cancel"), 404, "task_not_found")
        listed = [task["id"] for task in servers[other].get("/tasks").json()["data"]]
        assert tasks[name]["id"] not in listed
        assert tasks[other]["id"] in listed
    for action in ("load", "unload"):  # forwarded with the user's token: the user's scopes
        refused = servers["alice"].post(f"/models/{MODEL}/{action}")
        assert_problem(refused, 403, "insufficient_scope")
