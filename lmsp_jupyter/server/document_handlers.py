"""The ``/lmsp/v1`` routes of the service itself: its document, its OpenAPI, the catch-all.

The models' handlers are in :mod:`.model_handlers`, the responses' in :mod:`.response_handlers`,
the tasks' in :mod:`.task_handlers`; the route table is :mod:`.routes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

from .._version import __version__
from ..protocol.errors import LmspError
from ..protocol.models import AuthInfo, Capability, ServiceDocument, ServiceInfo
from .auth import JUPYTER_SCOPES
from .base import LmspHandler
from .operations import Operation, json_reply, ref


class ServiceHandler(LmspHandler):
    """``GET /lmsp/v1``: the service document."""

    operations = {
        "get": Operation(
            "getService",
            "The service document: version, capabilities, scopes",
            "service",
            {"200": json_reply(ref("ServiceDocument"), "The service document.")},
        )
    }

    def get(self) -> None:
        document = ServiceDocument(
            service=ServiceInfo(name="lmsp-jupyter", version=__version__),
            capabilities=list(get_args(Capability)),  # every one LMSP 1.0 defines
            auth=AuthInfo(scopes=sorted(JUPYTER_SCOPES)),
        )
        self.write_model(document)


class OpenApiHandler(LmspHandler):
    """``GET /lmsp/v1/openapi.json``: this API's OpenAPI document (a valid token, no scope)."""

    operations = {
        "get": Operation(
            "getOpenApi",
            "This OpenAPI document",
            "service",
            {
                "200": json_reply(
                    {"type": "object", "required": ["openapi", "info", "paths"]},
                    "The OpenAPI 3.1 document of `/lmsp/v1`.",
                )
            },
        )
    }

    def get(self) -> None:
        # The app's setting: the document is built from the route table, which holds this class.
        document_json: Callable[[str], str] = self.settings["lmsp_openapi_json"]
        self.finish(document_json(self.base_url))


class NotFoundHandler(LmspHandler):
    """Any other path under ``/lmsp/``."""

    def get(self, path: str | None = None) -> None:
        raise LmspError("not_found", f"no LMSP endpoint at {self.request.path}")

    head = post = put = patch = delete = get
