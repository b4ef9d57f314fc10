"""Where an LMSP service answers: a root URL and its token, and whether it answers there."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from ._wire import default_headers

#: How long a running server has to answer before the next one is tried.
_PROBE_SECONDS = 3.0


@dataclass(frozen=True)
class ServiceLocation:
    """An LMSP root URL and the bearer token to send there (``None``: send none)."""

    base_url: str
    token: str | None


def answers(location: ServiceLocation) -> bool:
    """Whether ``GET {base_url}/`` answers 200 with the location's token."""
    headers = default_headers(location.token)
    try:
        reply = httpx.get(f"{location.base_url}/", headers=headers, timeout=_PROBE_SECONDS)
    except httpx.TransportError:
        return False
    return reply.status_code == 200
