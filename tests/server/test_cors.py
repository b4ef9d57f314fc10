"""Cross-origin requests (LMSP 10): refused unless allowed; preflight for allowed origins."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lmsp_jupyter.server.auth import JUPYTER_SCOPES, hash_token
from tests.conftest import MODEL, LiveServer, running_server
from tests.server.helpers import assert_problem

ALLOWED = "http://tool.example"
FOREIGN = "http://evil.example"
CONFIGURED_TOKEN = "cors-configured-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server that allows one other origin."""
    tmp: Path = tmp_path_factory.mktemp("cors")
    tokens = [{"sha256": hash_token(CONFIGURED_TOKEN), "scopes": sorted(JUPYTER_SCOPES)}]
    with running_server(
        tmp, f"--ServerApp.allow_origin={ALLOWED}", config={"LmspApp": {"tokens": tokens}}
    ) as started:
        yield started


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


@pytest.fixture(scope="module")
def no_cors_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server that allows no other origin (Jupyter's default)."""
    with running_server(tmp_path_factory.mktemp("no-cors")) as started:
        yield started


@pytest.mark.parametrize("which", ["allow_origin", "default"])
def test_the_jupyter_token_from_a_foreign_origin_is_forbidden_origin(
    server: LiveServer, no_cors_server: LiveServer, which: str
) -> None:
    live = server if which == "allow_origin" else no_cors_server
    headers = {"Origin": FOREIGN, "Authorization": f"Bearer {live.token}"}
    for method, path in (("GET", "/models"), ("GET", ""), ("POST", "/tasks")):
        response = httpx.request(method, f"{live.lmsp}{path}", headers=headers, json={})
        assert_problem(response, 403, "forbidden_origin")
        assert response.headers.get("access-control-allow-origin") != FOREIGN


def test_a_configured_token_from_a_foreign_origin_is_forbidden_origin(server: LiveServer) -> None:
    headers = {"Origin": FOREIGN, "Authorization": f"Bearer {CONFIGURED_TOKEN}"}
    response = httpx.get(f"{server.lmsp}/models", headers=headers)
    assert_problem(response, 403, "forbidden_origin")
    assert response.headers.get("access-control-allow-origin") != FOREIGN
    allowed = httpx.get(f"{server.lmsp}/models", headers={**headers, "Origin": ALLOWED})
    assert allowed.status_code == 200


def test_the_foreign_origin_is_never_echoed_even_without_allowed_origins(
    no_cors_server: LiveServer,
) -> None:
    headers = {"Origin": FOREIGN, "Authorization": f"Bearer {no_cors_server.token}"}
    for response in (
        httpx.get(f"{no_cors_server.lmsp}/models", headers=headers),
        httpx.get(f"{no_cors_server.lmsp}/models", headers={"Origin": FOREIGN}),
        preflight(no_cors_server, FOREIGN),
    ):
        assert response.status_code in (401, 403), response.text
        assert "access-control-allow-origin" not in response.headers


def test_same_origin_and_origin_less_requests_with_the_token_are_served(
    no_cors_server: LiveServer,
) -> None:
    own_origin = no_cors_server.root.split("/jp/")[0]
    for headers in ({"Origin": own_origin}, {}):
        headers["Authorization"] = f"Bearer {no_cors_server.token}"
        response = httpx.get(f"{no_cors_server.lmsp}/models", headers=headers)
        assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "/models/no-such-model", None, 404, "model_not_found"),
        ("POST", "/responses", {"model": MODEL}, 400, "invalid_request"),
        ("POST", "/responses", {"model": "no-such-model", "input": "x"}, 404, "model_not_found"),
        ("GET", "/tasks/task_nothing", None, 404, "task_not_found"),
        ("DELETE", "/models", None, 405, "method_not_allowed"),
        ("GET", "/nowhere", None, 404, "not_found"),
    ],
)
def test_error_replies_to_an_allowed_origin_carry_the_cors_header(
    server: LiveServer, method: str, path: str, body: object, status: int, code: str
) -> None:
    headers = {"Origin": ALLOWED, "Authorization": f"Bearer {server.token}"}
    response = httpx.request(method, f"{server.lmsp}{path}", headers=headers, json=body)
    assert_problem(response, status, code)
    assert response.headers["access-control-allow-origin"] == ALLOWED


def test_unauthorized_and_version_errors_to_an_allowed_origin_carry_the_cors_header(
    server: LiveServer,
) -> None:
    response = httpx.get(f"{server.lmsp}/models", headers={"Origin": ALLOWED})
    assert_problem(response, 401, "unauthorized")
    assert response.headers["access-control-allow-origin"] == ALLOWED
    headers = {"Origin": ALLOWED, "Authorization": f"Bearer {server.token}", "LMSP-Version": "2.0"}
    response = httpx.get(f"{server.lmsp}/models", headers=headers)
    assert_problem(response, 400, "unsupported_version")
    assert response.headers["access-control-allow-origin"] == ALLOWED


def test_anthropics_api_allows_its_headers_and_its_errors_carry_the_cors_header(
    server: LiveServer,
) -> None:
    messages = f"{server.root}lmsp/anthropic/v1/messages"
    asked = "x-api-key, anthropic-version, anthropic-beta, content-type"
    response = httpx.options(
        messages,
        headers={
            "Origin": ALLOWED,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": asked,
        },
    )
    assert response.status_code == 200
    allowed = {h.strip() for h in response.headers["access-control-allow-headers"].split(",")}
    assert {h.strip() for h in asked.split(",")} <= allowed
    refused = httpx.post(messages, headers={"Origin": ALLOWED, "x-api-key": "wrong"}, json={})
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    assert refused.headers["access-control-allow-origin"] == ALLOWED
