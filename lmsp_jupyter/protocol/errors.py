"""Problem documents (RFC 9457) and the one error type every layer raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

ProblemCode = Literal[
    "invalid_request",
    "unsupported_capability",
    "context_length_exceeded",
    "unsupported_version",
    "unauthorized",
    "insufficient_scope",
    "forbidden_origin",
    "model_not_found",
    "response_not_found",
    "task_not_found",
    "not_found",
    "method_not_allowed",
    "idempotency_in_progress",
    "model_busy",
    "event_history_expired",
    "payload_too_large",
    "unsupported_media_type",
    "idempotency_key_reused",
    "rate_limited",
    "overloaded",
    "engine_unavailable",
    "generation_failed",
    "service_restarted",
    "internal_error",
]

#: HTTP status and title of each problem code (LMSP 1.0 section 9.3).
PROBLEM_TYPES: dict[str, tuple[int, str]] = {
    "invalid_request": (400, "Invalid request"),
    "unsupported_capability": (400, "Unsupported capability"),
    "context_length_exceeded": (400, "Context length exceeded"),
    "unsupported_version": (400, "Unsupported version"),
    "unauthorized": (401, "Unauthorized"),
    "insufficient_scope": (403, "Insufficient scope"),
    "forbidden_origin": (403, "Forbidden origin"),
    "model_not_found": (404, "Model not found"),
    "response_not_found": (404, "Response not found"),
    "task_not_found": (404, "Task not found"),
    "not_found": (404, "Not found"),
    "method_not_allowed": (405, "Method not allowed"),
    "idempotency_in_progress": (409, "Idempotency key in progress"),
    "model_busy": (409, "Model busy"),
    "event_history_expired": (410, "Event history expired"),
    "payload_too_large": (413, "Payload too large"),
    "unsupported_media_type": (415, "Unsupported media type"),
    "idempotency_key_reused": (422, "Idempotency key reused"),
    "rate_limited": (429, "Too many requests"),
    "overloaded": (503, "Overloaded"),
    "engine_unavailable": (503, "Engine unavailable"),
    "generation_failed": (500, "Generation failed"),
    "service_restarted": (500, "Service restarted"),
    "internal_error": (500, "Internal error"),
}
#: Codes this service adds to LMSP 1.0's table (9.3): a per-owner limit (docs/jupyterhub.md).
EXTENSION_CODES = frozenset({"rate_limited"})
#: The statuses of problem documents: an answer with another status is not a problem.
PROBLEM_STATUSES = frozenset(status for status, _ in PROBLEM_TYPES.values())


class Problem(BaseModel):
    """An RFC 9457 problem document as LMSP sends it."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    code: ProblemCode
    detail: str | None = None
    param: str | None = None
    #: The same text as ``detail``, where OpenAI's clients look for it (11.4).
    message: str | None = None


class LmspError(Exception):
    """An LMSP error: raised anywhere, turned into ``application/problem+json`` at the edge.

    ``retry_after`` (seconds until the client may try again) and ``replayed`` (the error is
    the stored answer of an idempotency key) are what it means; the server turns them into
    headers. ``headers`` are the server's own (``WWW-Authenticate``, ``Allow``).
    """

    def __init__(
        self,
        code: ProblemCode,
        detail: str | None = None,
        *,
        param: str | None = None,
        retry_after: int | None = None,
        replayed: bool = False,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail or code)
        self.code = code
        self.detail = detail
        self.param = param
        self.retry_after = retry_after
        self.replayed = replayed
        self.headers = headers or {}
        self.extra = extra

    def rename_param(self, rename: Callable[[str], str]) -> None:
        """Name the field at fault as ``rename`` names it: a field of the request that a
        client's request became, as the client's request names it (a chat's ``messages``, a
        task's ``request.input``)."""
        if self.param is not None:
            self.param = rename(self.param)

    @property
    def status(self) -> int:
        """The HTTP status of this error's code."""
        return PROBLEM_TYPES[self.code][0]

    @property
    def is_client_error(self) -> bool:
        """Whether the request itself is at fault: the same request is refused the same way
        again (a failure of the service may not be, nor a refusal that says when to retry,
        as ``429 rate_limited``)."""
        return self.status < 500 and self.retry_after is None

    def to_problem(self) -> Problem:
        """The problem document describing this error."""
        status, title = PROBLEM_TYPES[self.code]
        return Problem(
            title=title,
            status=status,
            code=self.code,
            detail=self.detail,
            param=self.param,
            message=self.detail or title,
            **self.extra,
        )
