"""The OpenAPI 3.1 description of ``/lmsp/v1``, built from the routes that serve it.

Paths are relative to the server object, ``{base_url}lmsp/v1``: ``/models`` is
``{base_url}lmsp/v1/models`` and ``/`` is the service document. The paths and methods come from
the routes in :data:`lmsp_jupyter.server.routes.default_handlers` and the usage route of
:mod:`lmsp_jupyter.server.hub`, each operation from its
handler's ``operations`` (:mod:`lmsp_jupyter.server.operations`), and every schema from
:mod:`lmsp_jupyter.protocol` (:mod:`lmsp_jupyter.server.components`).
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Iterable
from typing import Any

from jupyter_server.utils import url_path_join

from .._version import __version__
from .base import LmspHandler
from .components import (
    ERROR_STATUSES,
    HEADERS,
    PARAMETERS,
    PATH_PARAMETERS,
    error_response,
    protocol_schemas,
)
from .document_handlers import NotFoundHandler
from .hub import usage_handlers
from .operations import COMMON_ERRORS, ref
from .routes import default_handlers

__all__ = ["openapi_document", "openapi_json"]

OPENAPI_VERSION = "3.1.0"
#: The routes the document describes: LMSP's, and this implementation's usage extension.
documented_routes: list[tuple[str, type[LmspHandler]]] = [*usage_handlers, *default_handlers]
_PREFIX = "/lmsp/v1"


def _route_paths() -> Iterable[tuple[str, type[LmspHandler]]]:
    """Each route of :data:`documented_routes` as an OpenAPI path relative to ``/lmsp/v1``."""
    for pattern, handler in documented_routes:
        if handler is NotFoundHandler or not pattern.startswith(_PREFIX):
            continue
        verbs = handler.implemented_verbs()
        names = [
            name
            for name in inspect.signature(getattr(handler, verbs[0])).parameters
            if name != "self"
        ]
        parts = re.split(r"\([^)]*\)", pattern.removeprefix(_PREFIX).removesuffix("/?"))
        assert len(parts) == len(names) + 1, (pattern, names)
        named = zip(names, parts[1:], strict=True)
        path = parts[0] + "".join(f"{{{name}}}{part}" for name, part in named)
        yield path or "/", handler


def _operation(method: str, path: str, handler: type[LmspHandler]) -> dict[str, Any]:
    spec = handler.operations.get(method)
    if spec is None:
        raise KeyError(f"{method.upper()} {path}: {handler.__name__} declares no operation")
    scope = spec.scope
    parameters: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": PATH_PARAMETERS.get(name, ""),
            "schema": {"type": "string", "minLength": 1},
        }
        for name in re.findall(r"\{([^}]+)\}", path)
    ]
    parameters += [{"$ref": f"#/components/parameters/{name}"} for name in spec.parameters]
    parameters.append({"$ref": "#/components/parameters/LMSP-Version"})
    operation: dict[str, Any] = {
        "operationId": spec.operation_id,
        "summary": spec.summary,
        "tags": [spec.tag],
        "parameters": parameters,
        "security": [{"bearer": [scope] if scope else []}],
    }
    if scope:
        operation["description"] = f"Needs the scope `{scope}`."
    else:
        operation["description"] = "Needs a valid token, no scope."
    if spec.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": ref(spec.body)}},
        }
    responses = dict(spec.responses)
    for status in sorted({*COMMON_ERRORS, *spec.errors}):
        responses[str(status)] = {"$ref": f"#/components/responses/Problem{status}"}
    operation["responses"] = responses
    return operation


@functools.cache
def _paths() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for path, handler in _route_paths():
        item = paths.setdefault(path, {})
        for verb in handler.implemented_verbs():
            item[verb] = _operation(verb, path, handler)
    return paths


@functools.cache
def openapi_document(server_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``/lmsp/v1`` on a Jupyter server at ``server_url``.

    ``server_url`` is the server's base URL (``/jp/`` or ``http://host:8888/jp/``); the
    document's server is ``{server_url}lmsp/v1`` and its paths are relative to that. The
    document is built once per ``server_url`` and shared: do not change it.
    """
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "LMSP 1.0 (lmsp-jupyter)",
            "version": __version__,
            "summary": "Local language models served from the Jupyter server.",
            "description": (
                "LMSP (Local Model Service Protocol) 1.0, served under the Jupyter server's "
                "base_url. Every request needs `Authorization: Bearer <token>` (the Jupyter "
                "server's token holds every scope); every reply carries `LMSP-Version: 1.0`; "
                "every error is an `application/problem+json` document with a `code`. A "
                "method a path does not serve → 405 `method_not_allowed` with `Allow`; an "
                "unknown path under `/lmsp/` → 404 `not_found`."
            ),
            "license": {"name": "BSD-3-Clause", "identifier": "BSD-3-Clause"},
        },
        "servers": [
            {
                "url": url_path_join(server_url, "lmsp/v1"),
                "description": "LMSP on this Jupyter server.",
            }
        ],
        "tags": [
            {"name": "service", "description": "The service and this document."},
            {"name": "models", "description": "The models on this machine."},
            {"name": "responses", "description": "Generating responses."},
            {"name": "tasks", "description": "Responses run in the background."},
            {"name": "embeddings", "description": "Vectors of texts."},
        ],
        "paths": _paths(),
        "components": {
            "schemas": protocol_schemas(),
            "parameters": PARAMETERS,
            "headers": HEADERS,
            "responses": {f"Problem{status}": error_response(status) for status in ERROR_STATUSES},
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The Jupyter server's token, or a configured LMSP token with "
                    "scopes: `models:read`, `models:write`, `responses:read`, `responses:write`, "
                    "`tasks:read`, `tasks:write` (`tools:execute` is reserved, granted to no one).",
                }
            },
        },
        "security": [{"bearer": []}],
    }


@functools.cache
def openapi_json(server_url: str = "/") -> str:
    """:func:`openapi_document` as JSON text, built once per ``server_url``: what
    ``GET /lmsp/v1/openapi.json`` serves."""
    return json.dumps(openapi_document(server_url))
