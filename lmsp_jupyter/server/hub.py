"""The service as a JupyterHub service: who calls (the hub says), what each user may see, the
usage endpoint, and where the hub says to listen.

``jupyter lmsp --hub-service`` runs under the prefix the hub gives (``JUPYTERHUB_SERVICE_PREFIX``,
normally ``/services/lmsp/``). API requests carry a user's hub token (``Authorization: Bearer``
or ``token``); browsers log in through the hub's OAuth (``HubOAuth``, its callback at
``{prefix}oauth_callback``). Each hub user is an owner of its own tasks and stored responses
(``hub:<name>``) and holds :data:`USER_SCOPES`: it lists models and asks them, but loads and
unloads none. A user holding :data:`ADMIN_SCOPE` holds every LMSP scope, and reads, follows and
cancels everyone's tasks and responses and reads everyone's usage.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tornado.web import HTTPError, RequestHandler

from ..protocol.errors import LmspError
from ..protocol.models import Scope
from .auth import JUPYTER_SCOPES, Principal
from .base import LmspHandler
from .operations import Operation, json_reply

if TYPE_CHECKING:
    from jupyterhub.services.auth import HubOAuth

#: The hub scope that lets a user load and unload models, and see every user's tasks,
#: responses and usage. Declared in ``c.JupyterHub.custom_scopes`` and granted by a role
#: (``lmsp-admin`` in docs/jupyterhub.md).
ADMIN_SCOPE = "custom:lmsp:admin"
#: The LMSP scopes of every hub user: the models listed, asked, and its own tasks. A model
#: loaded or unloaded is loaded or unloaded for every user: that is the admin's.
USER_SCOPES: frozenset[Scope] = frozenset(
    {"models:read", "responses:read", "responses:write", "tasks:read", "tasks:write"}
)
#: What a client is told to wait when the hub does not answer, in seconds.
HUB_RETRY_AFTER_SECONDS = 10
#: The owner name of a hub user.
OWNER_PREFIX = "hub:"


def hub_principal(user: Mapping[str, Any]) -> Principal:
    """The principal of a hub user model: its own owner, with :data:`USER_SCOPES`; with
    :data:`ADMIN_SCOPE`, an admin with every LMSP scope."""
    admin = ADMIN_SCOPE in (user.get("scopes") or ())
    return Principal(
        OWNER_PREFIX + str(user["name"]),
        JUPYTER_SCOPES if admin else USER_SCOPES,
        admin=admin,
    )


class HubAccess:
    """Asks the hub who a request's token or cookie is (answers are cached by ``HubAuth``)."""

    def __init__(self, auth: HubOAuth) -> None:
        self.auth = auth

    async def principal(self, handler: Any) -> Principal | None:
        """The hub user of ``handler``'s request, or ``None`` (no credential, or one the hub
        does not know or that lacks access to this service)."""
        try:
            found = self.auth.get_user(handler, sync=False)
            user = await found if inspect.isawaitable(found) else found
        except HTTPError as exc:  # the hub does not answer, or refuses this service's token
            handler.log.error("the hub could not say who called: %s", exc.log_message)
            raise LmspError(
                "overloaded",
                "the hub does not answer; retry later",
                retry_after=HUB_RETRY_AFTER_SECONDS,
            ) from None
        if user is None:
            return None
        if not getattr(handler, "_token_authenticated", False):
            _check_xsrf(handler)  # a browser's hub cookie: a page elsewhere may not use it
        return hub_principal(user)


def _check_xsrf(handler: Any) -> None:
    """Tornado's XSRF check of a cookie-authenticated request that changes something."""
    if handler.request.method in ("GET", "HEAD", "OPTIONS"):
        return
    try:
        RequestHandler.check_xsrf_cookie(handler)
    except HTTPError:
        raise LmspError("forbidden_origin", "the XSRF check failed") from None


def hub_access(**kwargs: Any) -> HubAccess:
    """The hub's auth from its ``JUPYTERHUB_*`` environment (needs the ``jupyterhub``
    package: ``pip install lmsp-jupyter[hub]``)."""
    from jupyterhub.services.auth import HubOAuth

    return HubAccess(HubOAuth(**kwargs))


def hub_server_arguments(environ: Mapping[str, str]) -> list[str]:
    """The Jupyter server options of a hub service: listen where ``JUPYTERHUB_SERVICE_URL``
    says, under ``JUPYTERHUB_SERVICE_PREFIX``; an error naming what is missing."""
    url, prefix = environ.get("JUPYTERHUB_SERVICE_URL"), environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if not url or not prefix or not environ.get("JUPYTERHUB_API_TOKEN"):
        raise SystemExit(
            "--hub-service: JUPYTERHUB_SERVICE_URL, JUPYTERHUB_SERVICE_PREFIX and "
            "JUPYTERHUB_API_TOKEN must be set (JupyterHub sets them for a managed service; "
            "see docs/jupyterhub.md for an external one)"
        )
    where = urlsplit(url)
    return [
        f"--ServerApp.ip={where.hostname or '127.0.0.1'}",
        f"--ServerApp.port={where.port or 80}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.base_url={prefix}",
        "--LmspApp.hub_service=True",
    ]


def hub_service_argv(argv: list[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    """``argv`` with ``--hub-service`` replaced by the options it stands for."""
    if "--hub-service" not in argv:
        return argv
    rest = [arg for arg in argv if arg != "--hub-service"]
    return [*hub_server_arguments(environ), *rest]


USAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["owner", "responses", "input_tokens", "output_tokens"],
                "properties": {
                    "owner": {"type": "string"},
                    "responses": {"type": "integer"},
                    "input_tokens": {"type": "integer"},
                    "output_tokens": {"type": "integer"},
                    "updated_at": {"type": "integer"},
                },
            },
        },
    },
}


class UsageHandler(LmspHandler):
    """``GET /lmsp/v1/x-lmsp-jupyter/usage``: the tokens the caller's responses used, added
    up (an admin: every owner's)."""

    operations = {
        "get": Operation(
            "getUsage",
            "Token usage per owner (this service's extension)",
            "service",
            {"200": json_reply(USAGE_SCHEMA, "The caller's usage; an admin's: everyone's.")},
            scope="responses:read",
        )
    }

    def get(self) -> None:
        owner = None if self.principal.admin else self.principal.owner
        rows = self.settings["lmsp_usage"].of(owner)
        self.finish({"object": "list", "data": [dict(row) for row in rows]})


#: The routes of hub mode and of usage, mounted before LMSP's catch-all.
usage_handlers: list[tuple[str, type[LmspHandler]]] = [
    (r"/lmsp/v1/x-lmsp-jupyter/usage", UsageHandler),
]
