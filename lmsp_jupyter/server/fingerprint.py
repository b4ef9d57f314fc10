"""What "the same request" means for an ``Idempotency-Key`` (LMSP 9.2), from the HTTP request."""

from __future__ import annotations

import hashlib
import json


def fingerprint(path: str, body: bytes, value: object = None) -> str:
    """What "the same request" means: the same endpoint and the same JSON value.

    ``value`` is the parsed body (``None`` when it is not JSON; then its bytes count): key
    order, white space, escapes and ``1`` against ``1.0`` do not make another request.
    """
    canonical = body if value is None else _canonical(value).encode()
    return hashlib.sha256(path.encode() + b"\0" + canonical).hexdigest()


def _canonical(value: object) -> str:
    def normal(node: object) -> object:
        if isinstance(node, float) and node.is_integer():
            return int(node)
        if isinstance(node, dict):
            return {key: normal(item) for key, item in node.items()}
        if isinstance(node, list):
            return [normal(item) for item in node]
        return node

    return json.dumps(normal(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
