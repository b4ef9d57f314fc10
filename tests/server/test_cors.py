"""Cross-origin requests (LMSP 10): refused unless allowed; preflight for allowed origins."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, start_server, stop_server
from tests.server.test_http import assert_problem

ALLOWED = "http://tool.example"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server that allows one other origin."""
    tmp: Path = tmp_path_factory.mktemp("cors")
    started = start_server(tmp, f"--ServerApp.allow_origin={ALLOWED}")
    yield started
    stop_server(started)


def preflight(server: LiveServer, origin: str, path: str = "/responses") -> httpx.Response:
    """What a browser sends before a cross-origin POST with LMSP's headers (no credentials)."""
    headers = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, lmsp-version",
    }
    return httpx.options(f"{server.lmsp}{path}", headers=headers)


def test_preflight_from_an_allowed_origin_is_answered_without_a_token(server: LiveServer) -> None:
    response = preflight(server, ALLOWED)
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == ALLOWED
    allowed = {h.strip() for h in response.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "lmsp-version", "idempotency-key"} <= allowed
    assert "POST" in response.headers["access-control-allow-methods"]


def test_preflight_from_another_origin_is_forbidden_origin(server: LiveServer) -> None:
    assert_problem(preflight(server, "http://evil.example"), 403, "forbidden_origin")
    assert "access-control-allow-origin" not in preflight(server, "http://evil.example").headers


def test_a_request_from_the_allowed_origin_gets_its_answer_and_the_cors_header(
    server: LiveServer,
) -> None:
    headers = {"Origin": ALLOWED, "Authorization": f"Bearer {server.token}"}
    response = httpx.get(f"{server.lmsp}/models", headers=headers)
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert response.json()["object"] == "list"


def test_without_a_token_the_allowed_origin_is_still_unauthorized(server: LiveServer) -> None:
    response = httpx.get(f"{server.lmsp}/models", headers={"Origin": ALLOWED})
    assert_problem(response, 401, "unauthorized")
