"""Many users on one service (hub mode): each sees only its own tasks and responses, an admin
sees all, per-owner limits answer 429, usage adds up per owner. The hub's answers are played by
a stand-in for ``HubOAuth`` (the real hub: tests/server/test_jupyterhub.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
from tornado.web import HTTPError
from traitlets.config import Config

from lmsp_jupyter.server.auth import JUPYTER_SCOPES, Principal
from lmsp_jupyter.server.hub import (
    ADMIN_SCOPE,
    USER_SCOPES,
    HubAccess,
    hub_principal,
    hub_service_argv,
)
from tests.conftest import MODEL
from tests.helpers import eventually_async
from tests.server.helpers import assert_problem, parse_sse, server_config

USERS: dict[str, dict[str, Any]] = {
    "token-alice": {"name": "alice", "scopes": ["access:services!service=lmsp"]},
    "token-bob": {"name": "bob", "scopes": ["access:services!service=lmsp"]},
    "token-root": {"name": "root", "scopes": ["access:services!service=lmsp", ADMIN_SCOPE]},
}


class HubStandIn:
    """``HubOAuth.get_user`` as the hub answers it: the user model of a known token."""

    def __init__(self, users: Mapping[str, dict[str, Any]]) -> None:
        self.users = users

    async def get_user(self, handler: Any, *, sync: bool = True) -> dict[str, Any] | None:
        header = handler.request.headers.get("Authorization", "")
        if header == "Bearer hub-down":  # as HubAuth fails when the hub's API does not answer
            raise HTTPError(500, "Failed to connect to Hub API")
        user = self.users.get(header.removeprefix("Bearer ").strip())
        handler._token_authenticated = user is not None  # as HubAuth marks a token's request
        return user


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest) -> Config:
    return server_config(request, owner_max_requests=1, owner_max_tasks=1)


@pytest.fixture
def users(
    jp_serverapp: Any,
    http_server: Any,
    jp_http_port: int,
    jp_base_url: str,
    jp_asyncio_loop: asyncio.AbstractEventLoop,
) -> Iterator[dict[str, httpx.AsyncClient]]:
    """A client per hub user of the in-process server, which asks the stand-in hub."""
    jp_serverapp.web_app.settings["lmsp_hub"] = HubAccess(HubStandIn(USERS))
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url}lmsp/v1"
    clients = {
        user["name"]: httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        for token, user in USERS.items()
    }
    yield clients
    for client in clients.values():
        jp_asyncio_loop.run_until_complete(client.aclose())


async def finished_task(client: httpx.AsyncClient) -> dict[str, Any]:
    created = await client.post("/tasks", json={"type": "response", "request": ask()})
    assert created.status_code == 202, created.text
    task_id = created.json()["id"]
    async with client.stream("GET", f"/tasks/{task_id}/events") as response:
        events, _ = parse_sse([line async for line in response.aiter_lines()])
    assert events[-1].event == "response.completed"
    task: dict[str, Any] = (await client.get(f"/tasks/{task_id}")).json()
    return task


def ask(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": "x", "max_output_tokens": 8, **fields}


@pytest.mark.script({"deltas": ["a", "b", "c"]})
async def test_a_user_reaches_only_its_own_tasks_and_an_admin_reaches_all(
    users: dict[str, httpx.AsyncClient],
) -> None:
    alice, bob, root = users["alice"], users["bob"], users["root"]
    task = await finished_task(alice)
    path = f"/tasks/{task['id']}"
    assert_problem(await bob.get(path), 404, "task_not_found")
    assert_problem(await bob.get(f"{path}/events"), 404, "task_not_found")
    assert_problem(await bob.post(f"{path}/cancel"), 404, "task_not_found")
    assert_problem(await bob.get(f"/responses/{task['response_id']}"), 404, "response_not_found")
    assert (await bob.get("/tasks")).json()["data"] == []
    assert (await root.get(path)).json() == task
    assert (await root.post(f"{path}/cancel")).json()["status"] == "completed"
    async with root.stream("GET", f"{path}/events") as response:
        events, _ = parse_sse([line async for line in response.aiter_lines()])
    assert events[-1].event == "response.completed"
    assert (await root.get(f"/responses/{task['response_id']}")).status_code == 200


@pytest.mark.script({"deltas": ["a", "b", "c"]})
async def test_a_user_lists_and_asks_models_but_only_an_admin_loads_and_unloads_them(
    users: dict[str, httpx.AsyncClient],
) -> None:
    alice, root = users["alice"], users["root"]
    assert (await alice.get("/models")).status_code == 200
    assert (await alice.post("/responses", json=ask())).status_code == 200
    for action in ("load", "unload"):
        refused = await alice.post(f"/models/{MODEL}/{action}")
        assert_problem(refused, 403, "insufficient_scope")
        assert 'scope="models:write"' in refused.headers["WWW-Authenticate"]
        assert (await root.post(f"/models/{MODEL}/{action}")).status_code == 200
    unload = {"model": MODEL, "prompt": "", "keep_alive": 0}
    generate = str(alice.base_url).rstrip("/").removesuffix("v1") + "ollama/api/generate"
    ollama = await alice.post(generate, json=unload)  # Ollama's unload: keep_alive 0
    assert ollama.status_code == 403 and "unloading" in ollama.json()["error"]
    assert (await root.post(generate, json=unload)).status_code == 200


def test_a_hub_user_holds_the_user_scopes_and_the_admin_scope_every_scope() -> None:
    user = hub_principal({"name": "alice", "scopes": ["access:services!service=lmsp"]})
    assert user == Principal("hub:alice", USER_SCOPES, admin=False)
    assert "models:write" not in USER_SCOPES
    admin = hub_principal({"name": "root", "scopes": ["access:services", ADMIN_SCOPE]})
    assert admin == Principal("hub:root", JUPYTER_SCOPES, admin=True)


@pytest.mark.script({"deltas": ["a", "b", "c"]})
async def test_stored_responses_are_their_owners(users: dict[str, httpx.AsyncClient]) -> None:
    alice, bob, root = users["alice"], users["bob"], users["root"]
    stored = (await alice.post("/responses", json=ask(store=True))).json()
    assert (await alice.get(f"/responses/{stored['id']}")).json()["id"] == stored["id"]
    assert_problem(await bob.get(f"/responses/{stored['id']}"), 404, "response_not_found")
    follow_up = await bob.post("/responses", json=ask(previous_response_id=stored["id"]))
    assert_problem(follow_up, 404, "response_not_found")
    assert (await root.get(f"/responses/{stored['id']}")).json()["id"] == stored["id"]


@pytest.mark.script({"deltas": ["a"] * 40, "delay": 0.05})
async def test_a_user_over_its_limits_gets_429_and_others_do_not(
    users: dict[str, httpx.AsyncClient],
) -> None:
    alice, bob = users["alice"], users["bob"]
    async with alice.stream("POST", "/responses", json=ask(stream=True)) as first:
        lines = first.aiter_lines()
        async for line in lines:
            if line.startswith("event:"):
                break  # the first stream is running now
        second = await alice.post("/responses", json=ask())
        assert_problem(second, 429, "rate_limited")
        assert int(second.headers["Retry-After"]) > 0
        task = await alice.post("/tasks", json={"type": "response", "request": ask()})
        assert task.status_code == 202
        again = await alice.post("/responses", json=ask(background=True))
        assert_problem(again, 429, "rate_limited")
        assert (await alice.post(f"/tasks/{task.json()['id']}/cancel")).status_code == 200
        assert (await bob.post("/responses", json=ask())).status_code == 200
        rest = [line async for line in lines]  # read to its end
        assert "event: response.completed" in rest

    async def answered() -> bool:  # the first request's slot is freed as its handler returns
        reply = await alice.post("/responses", json=ask())
        assert reply.status_code in (200, 429), reply.text
        return reply.status_code == 200

    await eventually_async(answered, what="alice's next request answered after her stream")


@pytest.mark.script({"deltas": ["a", "b", "c"]})
async def test_usage_adds_up_per_owner(users: dict[str, httpx.AsyncClient]) -> None:
    alice, bob, root = users["alice"], users["bob"], users["root"]
    reported: dict[str, list[dict[str, int]]] = {"hub:alice": [], "hub:bob": []}
    for client, owner in ((alice, "hub:alice"), (alice, "hub:alice"), (bob, "hub:bob")):
        reported[owner].append((await client.post("/responses", json=ask())).json()["usage"])
    reported["hub:alice"].append((await finished_task(alice))["result"]["usage"])

    def expected(owner: str) -> dict[str, Any]:
        usages = reported[owner]
        return {
            "owner": owner,
            "responses": len(usages),
            "input_tokens": sum(u["input_tokens"] for u in usages),
            "output_tokens": sum(u["output_tokens"] for u in usages),
        }

    def counted(reply: httpx.Response) -> list[dict[str, Any]]:
        assert reply.status_code == 200, reply.text
        return [{k: v for k, v in row.items() if k != "updated_at"} for row in reply.json()["data"]]

    assert counted(await alice.get("/x-lmsp-jupyter/usage")) == [expected("hub:alice")]
    assert counted(await bob.get("/x-lmsp-jupyter/usage")) == [expected("hub:bob")]
    assert counted(await root.get("/x-lmsp-jupyter/usage")) == [
        expected("hub:alice"),
        expected("hub:bob"),
    ]


@pytest.mark.script({"deltas": ["a"]})
async def test_without_a_hub_credential_the_answer_is_401(
    users: dict[str, httpx.AsyncClient], jp_http_port: int, jp_base_url: str
) -> None:
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url}lmsp/v1"
    async with httpx.AsyncClient(base_url=base) as anonymous:
        assert_problem(await anonymous.get("/models"), 401, "unauthorized")
        wrong = await anonymous.get("/models", headers={"Authorization": "Bearer nope"})
        assert_problem(wrong, 401, "unauthorized")


@pytest.mark.script({"deltas": ["a"]})
async def test_a_hub_that_does_not_answer_is_503_with_retry_after(
    users: dict[str, httpx.AsyncClient],
) -> None:
    reply = await users["alice"].get("/models", headers={"Authorization": "Bearer hub-down"})
    assert_problem(reply, 503, "overloaded")
    assert int(reply.headers["Retry-After"]) > 0
    assert (await users["alice"].get("/models")).status_code == 200


def test_hub_service_listens_where_the_hubs_environment_says() -> None:
    environ = {
        "JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:10101",
        "JUPYTERHUB_SERVICE_PREFIX": "/services/lmsp/",
        "JUPYTERHUB_API_TOKEN": "secret",
    }
    assert hub_service_argv(["--hub-service", "--LocalEngine.threads=2"], environ) == [
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.port=10101",
        "--ServerApp.port_retries=0",
        "--ServerApp.base_url=/services/lmsp/",
        "--LmspApp.hub_service=True",
        "--LocalEngine.threads=2",
    ]
    assert hub_service_argv(["--LocalEngine.threads=2"], {}) == ["--LocalEngine.threads=2"]
    with pytest.raises(SystemExit, match="JUPYTERHUB_SERVICE_URL"):
        hub_service_argv(["--hub-service"], {"JUPYTERHUB_API_TOKEN": "secret"})


@pytest.mark.script({"deltas": ["a"] * 40, "delay": 0.05})
async def test_concurrent_task_requests_never_exceed_the_limit(
    users: dict[str, httpx.AsyncClient],
) -> None:
    """Tasks and background responses asked for at once: one is queued (owner_max_tasks=1),
    the rest refused, and a refused request's idempotency key stays free."""
    alice = users["alice"]
    task = {"type": "response", "request": ask()}
    replies = await asyncio.gather(
        *[alice.post("/tasks", json=task) for _ in range(6)],
        *[alice.post("/responses", json=ask(background=True)) for _ in range(2)],
        alice.post("/tasks", json=task, headers={"Idempotency-Key": "k1"}),
    )
    accepted = [reply for reply in replies if reply.status_code in (200, 202)]
    assert len(accepted) == 1, [reply.text for reply in replies]
    for reply in replies:
        if reply not in accepted:
            assert_problem(reply, 429, "rate_limited")
    (running,) = (await alice.get("/tasks", params={"status": "queued"})).json()["data"] or (
        await alice.get("/tasks", params={"status": "in_progress"})
    ).json()["data"]
    assert (await alice.post(f"/tasks/{running['id']}/cancel")).status_code == 200

    async def ended() -> bool:
        status = (await alice.get(f"/tasks/{running['id']}")).json()["status"]
        return status not in ("queued", "in_progress")

    await eventually_async(ended, what="the cancelled task ended")
    again = await alice.post("/tasks", json=task, headers={"Idempotency-Key": "k1"})
    if replies[-1] in accepted:  # the keyed one was the one queued: its answer again
        assert again.headers.get("Idempotent-Replayed") == "true"
    else:
        assert again.status_code == 202, again.text
        assert "Idempotent-Replayed" not in again.headers
