"""Who is calling: the Jupyter user (token, cookie, kernels) or a configured scoped token."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

from ..protocol.errors import LmspError
from ..protocol.models import Scope
from ..service.run import OWNER

#: Everything but ``tools:execute``, which this service grants to no one.
JUPYTER_SCOPES: frozenset[Scope] = frozenset(get_args(Scope)) - {"tools:execute"}
_BEARER = re.compile(r"^bearer\s+(\S+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Principal:
    """An owner of tasks and stored responses, and the scopes it holds."""

    owner: str
    scopes: frozenset[str]
    #: Whether it may read, follow and cancel every owner's tasks and responses (a hub admin).
    admin: bool = False


JUPYTER_USER = Principal(OWNER, frozenset(JUPYTER_SCOPES))


def hash_token(token: str) -> str:
    """How configured tokens are stored: the hex SHA-256 of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


class ScopedTokens:
    """Tokens configured besides Jupyter's own, each stored as a hash with its scopes."""

    def __init__(self, entries: Iterable[Mapping[str, Any]]) -> None:
        self._entries: list[tuple[str, Principal]] = []
        for number, entry in enumerate(entries):
            digest = str(entry.get("sha256", "")).lower()
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ValueError(f"LmspApp.tokens[{number}] needs a 'sha256' of 64 hex digits")
            scopes = frozenset(entry.get("scopes", ())) - {"tools:execute"}
            unknown = scopes - JUPYTER_SCOPES
            if unknown:
                raise ValueError(f"LmspApp.tokens[{number}] has unknown scopes {sorted(unknown)}")
            # The digest, not the name, tells owners apart: two tokens may share a name.
            owner = f"token:{digest}"
            self._entries.append((digest, Principal(owner, scopes)))

    def find(self, authorization: str | None) -> Principal | None:
        """The principal of a ``Bearer`` header carrying a configured token."""
        token = bearer_token(authorization)
        if token is None or not self._entries:
            return None
        digest = hash_token(token)
        for stored, principal in self._entries:
            if hmac.compare_digest(stored, digest):
                return principal
        return None


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header; ``None`` without one."""
    match = _BEARER.match(authorization or "")
    return None if match is None else match[1]


def require(principal: Principal, scope: str | None) -> None:
    """Refuse a principal without ``scope`` (403 with the challenge naming it)."""
    if scope is not None and scope not in principal.scopes:
        raise LmspError(
            "insufficient_scope",
            f"this token lacks the scope {scope!r}",
            headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scope}"'},
        )
