"""The opt-in Ollama listener (``LmspApp.ollama_address``): Ollama's clients with no key on a
loopback port, DNS rebinding refused, only listing and generation offered, a taken port
refused."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest
from tornado.httputil import HTTPHeaders, HTTPServerRequest, RequestStartLine

from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.server.auth import JUPYTER_USER, ScopedTokens
from lmsp_jupyter.server.ollama_listener import (
    LISTENER_OWNER,
    ListenerError,
    ListenerGuard,
    OllamaListener,
    parse_address,
)
from tests.conftest import MODEL, LiveServer, free_port, running_server
from tests.helpers import eventually


@pytest.fixture(scope="module")
def listener(
    tmp_path_factory: pytest.TempPathFactory, bundled_model_path: Path
) -> Iterator[tuple[LiveServer, str]]:
    """A server with the Ollama listener on a free loopback port: the server and its URL."""
    port = free_port()
    config = {"LmspApp": {"ollama_address": f"127.0.0.1:{port}"}}
    with running_server(tmp_path_factory.mktemp("listener"), config=config) as server:
        url = f"http://127.0.0.1:{port}"
        eventually(lambda: _answers(url), within=30, interval=0.2, what="the listener")
        yield server, url


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/version").status_code == 200
    except httpx.TransportError:
        return False


def test_clients_need_no_key_on_loopback(listener: tuple[LiveServer, str]) -> None:
    client = ollama.Client(host=listener[1])
    assert MODEL in {model.model for model in client.list().models}
    assert "completion" in (client.show(MODEL).capabilities or [])
    answer = client.chat(
        MODEL, messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2}
    )
    assert answer.done and answer.eval_count == 2


@pytest.mark.parametrize("host", ["evil.example", "evil.example:11434", "192.168.1.10"])
def test_a_foreign_host_is_refused(listener: tuple[LiveServer, str], host: str) -> None:
    answer = httpx.get(f"{listener[1]}/api/tags", headers={"Host": host})
    assert answer.status_code == 403
    assert "loopback" in answer.json()["error"]


def test_a_loopback_name_is_admitted(listener: tuple[LiveServer, str]) -> None:
    port = listener[1].rpartition(":")[2]
    answer = httpx.get(f"{listener[1]}/api/tags", headers={"Host": f"localhost:{port}"})
    assert answer.status_code == 200


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        ("http://evil.example", 403),
        ("https://127.0.0.1.evil.example", 403),
        ("http://localhost:3000", 200),
        ("http://127.0.0.1:8080", 200),
    ],
)
def test_a_foreign_origin_is_refused(
    listener: tuple[LiveServer, str], origin: str, status: int
) -> None:
    answer = httpx.get(f"{listener[1]}/api/tags", headers={"Origin": origin})
    assert answer.status_code == status


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/lmsp/v1/tasks"),
        ("POST", "/lmsp/v1/tasks"),
        ("GET", "/lmsp/v1/models"),
        ("POST", "/lmsp/v1/models/x/load"),
        ("POST", "/api/pull"),
        ("POST", "/api/create"),
        ("DELETE", "/api/delete"),
        ("GET", "/api/kernels"),
        ("GET", "/static/favicon.ico"),
        ("GET", "/lmsp/ollama/api/tags"),
    ],
)
def test_only_listing_and_generation_are_offered(
    listener: tuple[LiveServer, str], method: str, path: str
) -> None:
    answer = httpx.request(method, f"{listener[1]}{path}", json={"model": MODEL})
    assert answer.status_code == 404
    assert set(answer.json()) == {"error"}


def test_unloading_is_refused_and_loading_left_to_generation(
    listener: tuple[LiveServer, str],
) -> None:
    client = ollama.Client(host=listener[1])
    assert client.generate(MODEL, "").done_reason == "load"
    with pytest.raises(ollama.ResponseError) as caught:
        client.generate(MODEL, "", keep_alive=0)
    assert caught.value.status_code == 403


def test_an_embed_of_nothing_loads_nothing_and_still_checks_the_model(
    listener: tuple[LiveServer, str],
) -> None:
    with pytest.raises(ollama.ResponseError) as caught:  # this server's model does not embed
        ollama.Client(host=listener[1]).embed(MODEL, [])
    assert caught.value.status_code == 400 and "embedding" in caught.value.error
    log = (Path(listener[0].root_dir).parent / "server.log").read_text()
    assert "(embedding)" not in log


def test_a_taken_port_is_refused_and_the_jupyter_port_serves_on(
    tmp_path: Path, bundled_model_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        config = {"LmspApp": {"ollama_address": address}}
        with running_server(tmp_path, config=config) as server:
            log = tmp_path / "server.log"
            eventually(
                lambda: "the port is taken" in log.read_text(), within=30, what="the refusal"
            )
            with server.client() as client:
                assert client.get("/models").status_code == 200


def test_the_port_taken_message_names_the_address() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(ListenerError, match=f"{address}: the port is taken"):
            OllamaListener(address, token="", log=logging.getLogger())


def test_an_open_address_without_a_token_is_refused() -> None:
    with pytest.raises(ListenerError, match="open to the network"):
        OllamaListener("0.0.0.0:11434", token="", log=logging.getLogger())


@pytest.mark.parametrize("address", ["11434", "localhost:", ":11434", "host:99999", "h:x"])
def test_a_malformed_address_is_refused(address: str) -> None:
    with pytest.raises(ListenerError, match="host:port"):
        parse_address(address)


def request(**headers: str) -> HTTPServerRequest:
    """A request to the listener with these headers."""
    start = RequestStartLine("GET", "/api/tags", "HTTP/1.1")
    return HTTPServerRequest(start_line=start, headers=HTTPHeaders(headers))


def test_on_a_loopback_address_the_guard_admits_the_listener_principal() -> None:
    guard = ListenerGuard(open_loopback=True, token="secret", tokens=ScopedTokens([]))
    principal = guard(request(Host="[::1]:11434"))
    assert principal.owner == LISTENER_OWNER
    assert principal.scopes == {"models:read", "responses:write"}


def test_on_another_address_the_guard_needs_the_token() -> None:
    guard = ListenerGuard(open_loopback=False, token="secret", tokens=ScopedTokens([]))
    assert guard(request(Host="gpu-node:11434", Authorization="Bearer secret")) == JUPYTER_USER
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        with pytest.raises(LmspError) as caught:
            guard(request(Host="gpu-node:11434", **headers))
        assert caught.value.code == "unauthorized"


def test_a_loopback_origin_may_read_the_answers(listener: tuple[LiveServer, str]) -> None:
    origin = "http://localhost:3000"
    preflight = httpx.options(
        f"{listener[1]}/api/chat",
        headers={"Origin": origin, "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 200
    assert preflight.headers["Access-Control-Allow-Origin"] == origin
    assert "POST" in preflight.headers["Access-Control-Allow-Methods"]
    answer = httpx.get(f"{listener[1]}/api/tags", headers={"Origin": origin})
    assert answer.headers["Access-Control-Allow-Origin"] == origin
    refused = httpx.options(
        f"{listener[1]}/api/chat",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert refused.status_code == 403
    assert "Access-Control-Allow-Origin" not in refused.headers
