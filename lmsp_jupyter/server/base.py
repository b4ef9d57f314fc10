"""The base of every ``/lmsp/`` handler: LMSP auth, versioning and problem documents."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, ClassVar

from jupyter_server.auth.decorator import allow_unauthenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from pydantic import BaseModel
from tornado.web import HTTPError

from ..protocol.errors import LmspError
from ..protocol.models import LMSP_VERSION, Scope
from ..protocol.requests import parse_json_body
from ..service.embeddings import EmbeddingService
from ..service.idempotency import Action, IdempotencyKeys, Outcome
from ..service.limits import OwnerLimits
from ..service.models import ModelDirectory
from ..service.responses import ResponseService
from ..service.store.interface import store_problem
from ..service.tasks import TaskService
from .auth import JUPYTER_USER, Principal, ScopedTokens, require
from .fingerprint import fingerprint
from .operations import Operation

_VERSION = re.compile(r"^(\d+)(?:\.(\d+))?$")
#: The verbs a handler may implement (``options`` is the CORS preflight every handler answers).
HTTP_VERBS = ("get", "head", "post", "put", "patch", "delete")
#: Request headers a cross-origin client of LMSP may send (Jupyter's and LMSP's own).
_CORS_REQUEST_HEADERS = (
    "accept, content-type, authorization, x-xsrftoken, lmsp-version, idempotency-key, last-event-id"
)
_HTTP_ERROR_CODES: dict[int, Any] = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden_origin",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


class LmspHandler(ExtensionHandlerMixin, APIHandler):
    """Authenticates with Jupyter's identity provider, but answers LMSP problems itself.

    Every verb is marked for Jupyter as reachable without login so that its redirect or bare
    403 never answers an LMSP client; ``prepare`` then refuses anonymous requests with 401.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for verb in HTTP_VERBS:
            if verb in cls.__dict__:
                setattr(cls, verb, allow_unauthenticated(cls.__dict__[verb]))
        cls.scopes = {
            verb.upper(): operation.scope
            for verb, operation in cls.operations.items()
            if operation.scope is not None
        }

    #: What each implemented verb is (lower case → its operation): its scope here, and what the
    #: OpenAPI document says of it.
    operations: ClassVar[dict[str, Operation]] = {}
    #: The scope each implemented method needs, from ``operations``; absent: a valid token.
    scopes: ClassVar[dict[str, Scope]] = {}
    principal: Principal
    _json_body: dict[str, Any] | None = None

    @property
    def service(self) -> ResponseService:
        """The response service of this server."""
        service: ResponseService = self.settings["lmsp_responses"]
        return service

    @property
    def tasks(self) -> TaskService:
        """The task service of this server."""
        tasks: TaskService = self.settings["lmsp_tasks"]
        return tasks

    @property
    def embeddings(self) -> EmbeddingService:
        """The embedding service of this server."""
        embeddings: EmbeddingService = self.settings["lmsp_embeddings"]
        return embeddings

    @property
    def models(self) -> ModelDirectory:
        """The models this server offers."""
        models: ModelDirectory = self.settings["lmsp_models"]
        return models

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("LMSP-Version", LMSP_VERSION)

    async def prepare(self) -> None:  # type: ignore[override]
        await JupyterHandler.prepare(self)
        if self.request.method == "OPTIONS":
            # A CORS preflight carries no credentials; it is answered for allowed origins only.
            if not self.check_origin():
                raise LmspError("forbidden_origin", "requests from this origin are not allowed")
            return
        hub = self.settings.get("lmsp_hub")
        if hub is None and self.current_user is not None:
            self.principal = JUPYTER_USER
        else:
            tokens: ScopedTokens = self.settings["lmsp_tokens"]
            principal = tokens.find(self.request.headers.get("Authorization"))
            if principal is None and hub is not None:
                principal = await hub.principal(self)
            if principal is None:
                raise LmspError(
                    "unauthorized",
                    "a valid bearer token is required",
                    headers={"WWW-Authenticate": 'Bearer realm="lmsp"'},
                )
            self.principal = principal
        if not self.check_origin():
            raise LmspError("forbidden_origin", "requests from this origin are not allowed")
        _check_version(self.request.headers.get("LMSP-Version"))
        require(self.principal, self.scopes.get(self.request.method or ""))

    async def idempotent(self, action: Action, *, wait_if_running: bool) -> Outcome | None:
        """Run a creating request under its ``Idempotency-Key``, if it has one (9.2)."""
        keys: IdempotencyKeys = self.settings["lmsp_idempotency"]
        key = self.request.headers.get("Idempotency-Key")
        if key is not None:
            _check_idempotency_key(key)
        outcome = await keys.once(
            self.principal.owner,
            key,
            self._fingerprint() if key is not None else "",
            action,
            wait_if_running=wait_if_running,
        )
        if outcome is not None and outcome.replayed:
            self.set_header("Idempotent-Replayed", "true")
        return outcome

    def task_owner(self, task_id: str) -> str:
        """The owner whose task ``task_id`` the caller may reach: its own, or (an admin) the
        task's owner."""
        owner = self.tasks.owner(task_id) if self.principal.admin else None
        return owner or self.principal.owner

    def response_owner(self, response_id: str) -> str:
        """The owner whose response ``response_id`` the caller may reach (as :meth:`task_owner`)."""
        owner = self.service.owner(response_id) if self.principal.admin else None
        return owner or self.principal.owner

    @property
    def limits(self) -> OwnerLimits:
        """The per-owner limits of this server."""
        limits: OwnerLimits = self.settings["lmsp_limits"]
        return limits

    def check_task_limit(self) -> None:
        """Refuse one more task of a caller at its limit of queued and running ones."""
        if self.limits.max_tasks:
            self.limits.check_tasks(self.tasks.unfinished(self.principal.owner))

    def _fingerprint(self) -> str:
        try:
            value: object = self.json_body()
        except LmspError:  # refused the same way again: its bytes are its identity
            value = None
        return fingerprint(self.request.path, self.request.body, value)

    def skip_check_origin(self) -> bool:
        """Jupyter skips the origin check for preflights and token-authenticated requests;
        LMSP checks every request, whatever its credential (10)."""
        return False

    def set_cors_headers(self) -> None:
        """Jupyter's CORS headers, except its echo of any origin to token-authenticated requests:
        only a configured origin is ever named in ``Access-Control-Allow-Origin`` (10)."""
        super().set_cors_headers()
        if not (self.allow_origin or self.allow_origin_pat):
            self.clear_header("Access-Control-Allow-Origin")

    #: The request headers a cross-origin client may send (a dialect's handlers add theirs).
    cors_request_headers: ClassVar[str] = _CORS_REQUEST_HEADERS

    @allow_unauthenticated
    def options(self, *args: Any, **kwargs: Any) -> None:
        """Answer a CORS preflight: Jupyter's answer, with LMSP's request headers allowed."""
        super().options(*args, **kwargs)
        self.set_header("Access-Control-Allow-Headers", self.cors_request_headers)

    def check_xsrf_cookie(self) -> None:
        """Anonymous requests get 401 in ``prepare``; only logged-in browsers need XSRF."""
        if getattr(self, "_jupyter_current_user", None) is None:
            return
        if not self.token_authenticated and not self.check_origin():
            raise LmspError("forbidden_origin", "requests from this origin are not allowed")
        try:
            super().check_xsrf_cookie()
        except HTTPError:
            raise LmspError("forbidden_origin", "the XSRF check failed") from None

    def json_body(self) -> dict[str, Any]:
        """The request body as a JSON object, refusing other media types (parsed once)."""
        if self._json_body is None:
            limit: int = self.settings["lmsp_max_body_bytes"]
            if len(self.request.body) > limit:
                raise LmspError("payload_too_large", f"the body is over {limit} bytes")
            media_type = self.request.headers.get("Content-Type", "").split(";")[0]
            if media_type.strip().lower() != "application/json":
                raise LmspError("unsupported_media_type", "the body must be application/json")
            self._json_body = parse_json_body(self.request.body)
        return self._json_body

    def write_model(self, model: BaseModel, status: int = 200) -> None:
        """Send a protocol object as JSON."""
        self.set_status(status)
        self.finish(model.model_dump_json())

    def error_of(self, status_code: int, **kwargs: Any) -> LmspError:
        """The LMSP error that ``write_error``'s arguments stand for."""
        exc = kwargs["exc_info"][1] if "exc_info" in kwargs else None
        if isinstance(exc, LmspError):
            return exc
        if isinstance(exc, HTTPError) or exc is None:
            code = _HTTP_ERROR_CODES.get(status_code, "internal_error")
            return LmspError(code, getattr(exc, "log_message", None) or self._reason)
        return store_problem(exc) or LmspError(
            "internal_error", "the service failed; see the server log"
        )

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Every error under ``/lmsp/`` is a problem document, never a traceback or a page."""
        error = self.error_of(status_code, **kwargs)
        self.set_status(error.status)
        if error.code != "forbidden_origin":  # ``send_error`` cleared them; a browser reads this
            self.set_cors_headers()
        for name, value in error.headers.items():
            self.set_header(name, value)
        if error.retry_after is not None:
            self.set_header("Retry-After", str(error.retry_after))
        if error.replayed:
            self.set_header("Idempotent-Replayed", "true")
        problem = error.to_problem().model_dump(exclude_none=True)
        self.finish(json.dumps(problem), set_content_type="application/problem+json")

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """Client errors are logged in one line; only real failures get a traceback."""
        if isinstance(value, LmspError) and value.status < 500:
            self.log.info(
                "%s %s → %s %s", self.request.method, self.request.path, value.status, value.code
            )
        else:
            super().log_exception(typ, value, tb)

    @classmethod
    def implemented_verbs(cls) -> list[str]:
        """The verbs (lower case) this handler implements; the others answer 405. The one
        place that says so: the ``Allow`` header and the OpenAPI document both ask here."""
        return [verb for verb in HTTP_VERBS if getattr(cls, verb) is not LmspHandler.__dict__[verb]]

    def allowed_methods(self) -> list[str]:
        """The HTTP methods this handler implements."""
        return [verb.upper() for verb in self.implemented_verbs()]

    def _method_not_allowed(self, *args: str) -> None:
        raise LmspError(
            "method_not_allowed",
            f"{self.request.method} is not allowed here",
            headers={"Allow": ", ".join(self.allowed_methods())},
        )

    # Each handler overrides the verbs it serves; the others answer 405 with ``Allow``.
    get: Callable[..., Any]
    head: Callable[..., Any]
    post: Callable[..., Any]
    put: Callable[..., Any]
    patch: Callable[..., Any]
    delete: Callable[..., Any]
    get = head = post = put = patch = delete = allow_unauthenticated(_method_not_allowed)


#: The largest integer SQLite holds: a larger cursor or limit means the same as this one.
_LARGEST = 2**63 - 1


def non_negative_integer(value: str, param: str) -> int:
    """A non-negative integer parameter; anything else → ``invalid_request`` naming it."""
    if not (value.isascii() and value.isdigit()):
        raise LmspError("invalid_request", f"{param} must be a non-negative integer", param=param)
    digits = value.lstrip("0")
    return _LARGEST if len(digits) > len(str(_LARGEST)) else min(int(digits or "0"), _LARGEST)


def _check_idempotency_key(key: str) -> None:
    if not 1 <= len(key) <= 255 or not all(" " <= c <= "~" for c in key):
        raise LmspError(
            "invalid_request",
            "Idempotency-Key must be 1 to 255 printable ASCII characters",
            param="Idempotency-Key",
        )


def _check_version(header: str | None) -> None:
    """LMSP 1.0 section 9.1: no header means 1.0; another major or a later minor is refused."""
    if header is None:
        return
    match = _VERSION.match(header.strip())
    if match is None or int(match[1]) != 1 or int(match[2] or 0) > 0:
        raise LmspError(
            "unsupported_version",
            f"LMSP-Version {header!r} is not served",
            param="LMSP-Version",
            supported_versions=[LMSP_VERSION],
        )
