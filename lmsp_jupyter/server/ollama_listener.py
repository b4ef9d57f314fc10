"""The opt-in Ollama-compatible listener (``LmspApp.ollama_address``), for tools that take only
a host and a port and send no key.

It serves :data:`.routes.ollama_listener_handlers` (model listing and generation: no tasks,
no model loading or unloading, no admin) on its own port. On a loopback address it asks for no
token, and so refuses what a web page could send it: a ``Host`` that is not a loopback name
(DNS rebinding) or an ``Origin`` that is not a loopback one. On any other address it needs the
Jupyter token (or a configured one) as ``Authorization: Bearer``.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import logging
import socket
from typing import Any
from urllib.parse import urlsplit

from tornado.httpserver import HTTPServer
from tornado.httputil import HTTPServerRequest
from tornado.netutil import bind_sockets
from tornado.web import Application

from ..protocol.errors import LmspError
from ..protocol.models import Scope
from .auth import JUPYTER_USER, Principal, ScopedTokens, bearer_token
from .ollama_handlers import GUARD_SETTING
from .routes import ollama_listener_handlers

#: What a request on the loopback listener may do, without a token.
LISTENER_SCOPES: frozenset[Scope] = frozenset({"models:read", "responses:write"})
#: The owner of the listener's requests without a token.
LISTENER_OWNER = "ollama-listener"
#: Tornado settings of the Jupyter app that would add routes or change behaviour here.
_NOT_SHARED = ("static_path", "static_handler_class", "autoreload", "debug", "serve_traceback")


class ListenerError(RuntimeError):
    """The listener cannot start (its address is taken, or it would be open to the network)."""


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:11434`` for IPv6) as its host and port."""
    host, colon, port = address.strip().rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ListenerError(
            f"LmspApp.ollama_address {address!r} is not host:port (say 127.0.0.1:11434)"
        )
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost`` or a loopback address."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str:
    """The name in a ``Host`` header, without its port."""
    return urlsplit(f"//{host_header}").hostname or ""


class ListenerGuard:
    """Admits a request to the listener, as its principal, or refuses it."""

    def __init__(self, *, open_loopback: bool, token: str, tokens: ScopedTokens) -> None:
        self.open_loopback = open_loopback
        self.token = token
        self.tokens = tokens

    def __call__(self, request: HTTPServerRequest) -> Principal:
        origin = request.headers.get("Origin")
        if origin is not None and not is_loopback(urlsplit(origin).hostname or ""):
            raise LmspError("forbidden_origin", f"requests from the origin {origin} are refused")
        if request.method == "OPTIONS":  # a preflight carries no credentials and asks nothing
            return Principal(LISTENER_OWNER, frozenset())
        if self.open_loopback:
            host = _host_name(request.headers.get("Host", ""))
            if not is_loopback(host):
                raise LmspError(
                    "forbidden_origin", f"the Host {host!r} is not a loopback name: refused"
                )
            return Principal(LISTENER_OWNER, LISTENER_SCOPES)
        authorization = request.headers.get("Authorization")
        token = bearer_token(authorization)
        if token is not None and hmac.compare_digest(token, self.token):
            return JUPYTER_USER
        principal = self.tokens.find(authorization)
        if principal is None:
            raise LmspError("unauthorized", "a valid bearer token is required")
        return principal


class OllamaListener:
    """The listener's socket and HTTP server: bound at once, serving once started."""

    def __init__(self, address: str, *, token: str, log: logging.Logger) -> None:
        self.address = address
        self.host, self.port = parse_address(address)
        self.open_loopback = is_loopback(self.host)
        if not self.open_loopback and not token:
            raise ListenerError(
                f"LmspApp.ollama_address {address!r} is not a loopback address and the Jupyter "
                "server has no token: the listener would be open to the network, so it does "
                "not start (listen on 127.0.0.1, or set a token)"
            )
        self.token = token
        self.log = log
        self._server: HTTPServer | None = None
        try:
            self._sockets = bind_sockets(self.port, self.host, family=socket.AF_UNSPEC)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ListenerError(
                    f"LmspApp.ollama_address {address}: the port is taken (is Ollama itself "
                    "running?); the Ollama listener does not start. Stop what listens there "
                    "or choose another address."
                ) from None
            raise ListenerError(f"LmspApp.ollama_address {address}: {exc}") from None

    def start(self, jupyter_settings: dict[str, Any]) -> None:
        """Serve the Ollama routes with the Jupyter app's services, and the listener's guard."""
        settings = {k: v for k, v in jupyter_settings.items() if k not in _NOT_SHARED}
        settings[GUARD_SETTING] = ListenerGuard(
            open_loopback=self.open_loopback,
            token=self.token,
            tokens=settings["lmsp_tokens"],
        )
        routes = [
            (pattern, handler, {"name": "lmsp"}) for pattern, handler in ollama_listener_handlers
        ]
        self._server = HTTPServer(Application(routes, **settings), xheaders=False)
        self._server.add_sockets(self._sockets)
        self.log.info(
            "Ollama's API also listens on http://%s (listing and generation)", self.address
        )

    def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.stop()
        else:
            for sock in self._sockets:
                sock.close()
