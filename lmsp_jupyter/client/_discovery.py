"""Where the LMSP service is: the environment, a running Jupyter server, or one started here."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..protocol.environment import (
    HUB_TOKEN_VARIABLE,
    HUB_URL_VARIABLE,
    TOKEN_VARIABLE,
    URL_VARIABLE,
)
from ._location import ServiceLocation, answers


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


def _holds(server: Mapping[str, Any], cwd: Path) -> bool:
    root = server.get("root_dir")
    return isinstance(root, str) and cwd.resolve().is_relative_to(Path(root).resolve())
