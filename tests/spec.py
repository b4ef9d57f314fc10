"""Facts copied from the spec's text, for tests to hold the code against (not from the code)."""

import json
from typing import Any

#: The service document of LMSP 1.0 section 8, as the spec shows it (``GET /lmsp/v1``).
SPEC_SERVICE_DOCUMENT: dict[str, Any] = json.loads(
    """
{"object":"service","lmsp_version":"1.0","service":{"name":"lmsp-jupyter","version":"..."},
 "capabilities":["streaming","tasks","conversations","tools","structured_output","reasoning"],
 "auth":{"type":"bearer","scopes":["models:read","models:write","responses:read","responses:write","tasks:read","tasks:write"]}}
"""
)

#: The error table of LMSP 1.0 section 9.3: every problem code and its HTTP status.
SPEC_STATUSES = {
    "invalid_request": 400,
    "unsupported_capability": 400,
    "context_length_exceeded": 400,
    "unsupported_version": 400,
    "unauthorized": 401,
    "insufficient_scope": 403,
    "forbidden_origin": 403,
    "model_not_found": 404,
    "response_not_found": 404,
    "task_not_found": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "idempotency_in_progress": 409,
    "model_busy": 409,
    "event_history_expired": 410,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "idempotency_key_reused": 422,
    "overloaded": 503,
    "engine_unavailable": 503,
    "generation_failed": 500,
    "service_restarted": 500,
    "internal_error": 500,
}
