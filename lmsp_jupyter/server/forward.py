"""A JupyterHub user's server as a door to the hub's shared LMSP service.

When ``LmspApp.hub_service_url`` is set (by default from ``$LMSP_HUB_SERVICE_URL``, which the
hub's ``c.Spawner.environment`` gives every user's server), the user's server runs no models of
its own: every ``{base_url}lmsp/v1/…`` request of its Jupyter user (the lab extension's side
panel, answer views and inline completions, and any client holding the server's token) is
forwarded to that URL with the server's own hub token (``$JUPYTERHUB_API_TOKEN``), so the hub
service sees the user it belongs to. The browser stays on its own server's origin with its own
session: no CORS, no second login, no hub token in the page.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
from jupyter_server.utils import url_path_join
from tornado.iostream import StreamClosedError

from ..protocol.errors import LmspError
from .auth import JUPYTER_USER
from .base import LmspHandler
from .document_handlers import NotFoundHandler
from .hub import HUB_RETRY_AFTER_SECONDS

#: The request headers that mean something to LMSP, sent on as they came.
REQUEST_HEADERS = ("Accept", "Content-Type", "LMSP-Version", "Idempotency-Key", "Last-Event-ID")
#: The reply headers given back as they came (``Location`` with this server's path).
REPLY_HEADERS = (
    "Content-Type",
    "Retry-After",
    "Allow",
    "Idempotent-Replayed",
    "Cache-Control",
    "X-Accel-Buffering",
)
#: How long connecting to the hub service and sending it a request may take, in seconds (a
#: reply is waited for as long as it takes: a stream, or an answer waiting for its model).
CONNECT_SECONDS = 30.0


class HubForward:
    """Where requests go (the hub service's LMSP root) and the token they carry there."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self._path = urlsplit(self.url).path
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(CONNECT_SECONDS, read=None)
        )

    def target(self, path: str, query: str) -> str:
        """The hub service's URL of the local path ``path`` (under ``lmsp/v1``)."""
        return self.url + path + (f"?{query}" if query else "")

    def local_location(self, location: str, local_root: str) -> str:
        """A ``Location`` of the hub service, as a path under this server's LMSP root."""
        where = urlsplit(location)
        if where.path.startswith(self._path + "/"):
            return local_root + where.path.removeprefix(self._path)
        return location

    async def aclose(self) -> None:
        """Close the connections to the hub service."""
        await self.client.aclose()


def unreachable() -> LmspError:
    """What a caller gets when the hub service does not answer."""
    return LmspError(
        "overloaded",
        "the hub's LMSP service does not answer; retry later",
        retry_after=HUB_RETRY_AFTER_SECONDS,
    )


class ForwardHandler(LmspHandler):
    """``{base_url}lmsp/v1/…`` of a hub user's server: the hub service's answer, streamed."""

    async def prepare(self) -> None:  # type: ignore[override]
        await super().prepare()
        if self.request.method != "OPTIONS" and self.principal is not JUPYTER_USER:
            # A configured token's scopes are this server's; the hub knows only its user.
            raise LmspError(
                "insufficient_scope",
                "this server forwards LMSP to the hub's service for its Jupyter user only",
            )

    async def get(self, path: str | None = None) -> None:
        """Send the request on and the reply back, chunk by chunk as it comes."""
        forward: HubForward = self.settings["lmsp_forward"]
        headers = {
            name: self.request.headers[name]
            for name in REQUEST_HEADERS
            if name in self.request.headers
        }
        request = forward.client.build_request(
            self.request.method or "GET",
            forward.target(path or "/", self.request.query),
            headers=headers,
            content=self.request.body or None,
        )
        try:
            reply = await forward.client.send(request, stream=True)
        except httpx.TransportError as exc:
            self.log.error("the hub's LMSP service at %s: %s", forward.url, exc)
            raise unreachable() from None
        try:
            await self._relay(reply, forward)
        finally:
            await reply.aclose()

    head = post = put = patch = delete = get

    async def _relay(self, reply: httpx.Response, forward: HubForward) -> None:
        media_type = reply.headers.get("Content-Type", "")
        if reply.status_code >= 500 and not _from_lmsp(media_type):
            # The hub's proxy answers for a service that is down with its own error page.
            self.log.error("the hub's LMSP service answered %d", reply.status_code)
            raise unreachable()
        self.set_status(reply.status_code)
        for name in REPLY_HEADERS:
            if name in reply.headers:
                self.set_header(name, reply.headers[name])
        if "Location" in reply.headers:
            local_root = url_path_join(self.base_url, "lmsp/v1")
            self.set_header(
                "Location", forward.local_location(reply.headers["Location"], local_root)
            )
        try:
            async for chunk in reply.aiter_bytes():
                self.write(chunk)
                await self.flush()  # an event as soon as it comes
        except StreamClosedError:  # the caller left; its task runs on at the hub service
            return
        except httpx.TransportError as exc:  # the hub service went away mid-reply
            self.log.error("the hub's LMSP service stopped answering: %s", exc)
            if self._headers_written:
                return
            raise unreachable() from None
        self.finish()


def _from_lmsp(media_type: str) -> bool:
    """Whether a reply's media type is one LMSP answers with (JSON, a problem, events)."""
    kind = media_type.split(";")[0].strip().lower()
    return kind in ("application/json", "application/problem+json", "text/event-stream")


def forward_handlers() -> list[tuple[str, Any]]:
    """The routes of a forwarding server: all of ``lmsp/v1`` goes to the hub service."""
    return [(r"/lmsp/v1(/.*)?", ForwardHandler), (r"/lmsp(/.*)?", NotFoundHandler)]
