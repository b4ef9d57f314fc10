"""Where the LMSP service is: the environment, a running Jupyter server, or one started here."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ._wire import default_headers

#: Set by the server extension once it listens, so that the kernels it starts inherit them.
URL_VARIABLE = "LMSP_URL"
TOKEN_VARIABLE = "LMSP_TOKEN"
#: The Jupyter server's root directory, so a kernel can name its notebook as the server does.
ROOT_VARIABLE = "LMSP_ROOT_DIR"
#: The server's default model (``LmspApp.default_model``): what ``%lmsp ask`` asks without
#: ``--model``.
MODEL_VARIABLE = "LMSP_MODEL"
#: Set by JupyterHub for every single-user server (``c.Spawner.environment``): the LMSP root
#: of the hub's LMSP service, reached with the user's own ``$JUPYTERHUB_API_TOKEN``.
HUB_URL_VARIABLE = "LMSP_HUB_SERVICE_URL"
HUB_TOKEN_VARIABLE = "JUPYTERHUB_API_TOKEN"
#: How long a running server has to answer before the next one is tried.
_PROBE_SECONDS = 3.0


@dataclass(frozen=True)
class ServiceLocation:
    """An LMSP root URL and the bearer token to send there (``None``: send none)."""

    base_url: str
    token: str | None


def discover() -> ServiceLocation:
    """Find the LMSP service, starting one in this process as a last resort.

    In order: ``$LMSP_HUB_SERVICE_URL`` (with the user's ``$JUPYTERHUB_API_TOKEN``: a hub's
    shared service); ``$LMSP_URL`` (with ``$LMSP_TOKEN``); the first running Jupyter server whose
    ``lmsp/v1/`` answers with its token, servers whose root directory holds the current directory
    first; a Jupyter server with only this extension, started once per process on loopback.
    """
    from_environment = location_from_environment(os.environ)
    if from_environment is not None:
        return from_environment
    from jupyter_server.serverapp import list_running_servers

    running = running_server(list_running_servers(), Path.cwd())
    if running is not None:
        return running
    from ._inprocess import start_inprocess_service

    return start_inprocess_service()


def location_from_environment(environ: Mapping[str, str]) -> ServiceLocation | None:
    """The location ``$LMSP_HUB_SERVICE_URL`` (with ``$JUPYTERHUB_API_TOKEN``) or else
    ``$LMSP_URL`` and ``$LMSP_TOKEN`` name, if a URL is set."""
    hub_url = environ.get(HUB_URL_VARIABLE)
    if hub_url:
        return ServiceLocation(hub_url.rstrip("/"), environ.get(HUB_TOKEN_VARIABLE) or None)
    url = environ.get(URL_VARIABLE)
    if not url:
        return None
    return ServiceLocation(url.rstrip("/"), environ.get(TOKEN_VARIABLE) or None)


def running_server(servers: Iterable[dict[str, Any]], cwd: Path) -> ServiceLocation | None:
    """The first of ``servers`` (runtime-file records) whose LMSP root answers 200."""
    for server in sorted(servers, key=lambda server: not _holds(server, cwd)):
        url = server.get("url", "")
        if not url.startswith(("http://", "https://")):
            continue  # a UNIX socket
        location = ServiceLocation(f"{url.rstrip('/')}/lmsp/v1", server.get("token") or None)
        if answers(location):
            return location
    return None


def answers(location: ServiceLocation) -> bool:
    """Whether ``GET {base_url}/`` answers 200 with the location's token."""
    headers = default_headers(location.token)
    try:
        reply = httpx.get(f"{location.base_url}/", headers=headers, timeout=_PROBE_SECONDS)
    except httpx.TransportError:
        return False
    return reply.status_code == 200


def _holds(server: Mapping[str, Any], cwd: Path) -> bool:
    root = server.get("root_dir")
    return isinstance(root, str) and cwd.resolve().is_relative_to(Path(root).resolve())
