"""A JupyterHub user's server forwards its ``lmsp/v1`` to the hub's service
(``LmspApp.hub_service_url``): the in-process server forwards to the live server (the bundled
model) with that server's token, as a user's server does with its ``$JUPYTERHUB_API_TOKEN``.
The real hub, with spawned users' servers: tests/server/test_jupyterhub.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from traitlets.config import Config

from lmsp_jupyter.server.auth import hash_token
from lmsp_jupyter.server.forward import HubForward
from tests.conftest import MODEL, READER_TOKEN, LiveServer, free_port
from tests.server.helpers import assert_problem, lmsp_app, parse_sse, server_config


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest, live_server: LiveServer) -> Config:
    reader = {"name": "reader", "sha256": hash_token(READER_TOKEN), "scopes": ["models:read"]}
    return server_config(
        request,
        hub_service_url=live_server.lmsp,
        hub_service_token=live_server.token,
        tokens=[reader],
    )


@pytest.fixture
def direct(
    live_server: LiveServer, jp_asyncio_loop: asyncio.AbstractEventLoop
) -> Iterator[httpx.AsyncClient]:
    """The live server itself, as the hub service is reached."""
    headers = {"Authorization": f"Bearer {live_server.token}"}
    client = httpx.AsyncClient(base_url=live_server.lmsp, headers=headers, timeout=120)
    yield client
    jp_asyncio_loop.run_until_complete(client.aclose())


def ask() -> dict[str, Any]:
    return {"model": MODEL, "input": "Name a colour.", "max_output_tokens": 6, "temperature": 0}


async def test_the_forwarding_server_runs_no_service_of_its_own(
    jp_serverapp: Any, lmsp: httpx.AsyncClient, direct: httpx.AsyncClient
) -> None:
    assert "lmsp_responses" not in jp_serverapp.web_app.settings
    assert lmsp_app(jp_serverapp).forwards
    forwarded = await lmsp.get("/models")
    assert forwarded.status_code == 200
    assert forwarded.json() == (await direct.get("/models")).json()


async def test_a_task_is_created_and_followed_through_the_forward(
    lmsp: httpx.AsyncClient, direct: httpx.AsyncClient, jp_base_url: str
) -> None:
    created = await lmsp.post("/tasks", json={"type": "response", "request": ask()})
    assert created.status_code == 202, created.text
    task_id = created.json()["id"]
    assert created.headers["Location"] == f"{jp_base_url}lmsp/v1/tasks/{task_id}"
    async with lmsp.stream("GET", f"/tasks/{task_id}/events") as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events, _ = parse_sse([line async for line in response.aiter_lines()])
    assert events[-1].event in ("response.completed", "response.incomplete")
    stored = (await direct.get(f"/tasks/{task_id}")).json()
    assert (await lmsp.get(f"/tasks/{task_id}")).json() == stored
    headers = {"Last-Event-ID": str(events[1].id)}
    async with lmsp.stream("GET", f"/tasks/{task_id}/events", headers=headers) as response:
        replayed, _ = parse_sse([line async for line in response.aiter_lines()])
    assert [event.id for event in replayed] == [event.id for event in events[2:]]
    assert [event.data for event in replayed] == [event.data for event in events[2:]]


async def test_problems_of_the_hub_service_come_back_as_they_are(
    lmsp: httpx.AsyncClient, direct: httpx.AsyncClient
) -> None:
    body = {**ask(), "model": "no-such-model"}
    forwarded = await lmsp.post("/responses", json=body)
    assert_problem(forwarded, 404, "model_not_found")
    assert forwarded.json() == (await direct.post("/responses", json=body)).json()


async def test_only_the_jupyter_user_is_forwarded(
    lmsp: httpx.AsyncClient, jp_http_port: int, jp_base_url: str
) -> None:
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url}lmsp/v1"
    async with httpx.AsyncClient(base_url=base) as other:
        assert_problem(await other.get("/models"), 401, "unauthorized")
        reader = {"Authorization": f"Bearer {READER_TOKEN}"}
        assert_problem(await other.get("/models", headers=reader), 403, "insufficient_scope")
    assert_problem(await lmsp.get("/../ollama/api/tags"), 404, "not_found")


async def test_a_hub_service_that_does_not_answer_is_503_with_retry_after(
    jp_serverapp: Any, lmsp: httpx.AsyncClient
) -> None:
    settings = jp_serverapp.web_app.settings
    working = settings["lmsp_forward"]
    settings["lmsp_forward"] = HubForward(f"http://127.0.0.1:{free_port()}/lmsp/v1", "x")
    try:
        reply = await lmsp.get("/models")
    finally:
        await settings["lmsp_forward"].aclose()
        settings["lmsp_forward"] = working
    assert_problem(reply, 503, "overloaded")
    assert int(reply.headers["Retry-After"]) > 0
    assert (await lmsp.get("/models")).status_code == 200
