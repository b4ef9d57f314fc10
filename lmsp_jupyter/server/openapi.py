"""The OpenAPI 3.1 description of ``/lmsp/v1``, generated from the protocol's pydantic models.

Paths are relative to the server object, ``{base_url}lmsp/v1``: ``/models`` is
``{base_url}lmsp/v1/models`` and ``/`` is the service document. The paths and methods come from
the routes in :data:`lmsp_jupyter.server.handlers.default_handlers`, the scope of each operation
from its handler's ``scopes``, and every schema from :mod:`lmsp_jupyter.protocol`.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jupyter_server.utils import url_path_join
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from .. import __version__
from ..protocol import events
from ..protocol.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from ..protocol.errors import PROBLEM_TYPES, Problem
from ..protocol.items import MAX_TEXT_CHARS
from ..protocol.models import LMSP_VERSION, Model, ModelList, ServiceDocument
from ..protocol.requests import ResponseRequest
from ..protocol.responses import Response
from ..protocol.tasks import Task, TaskList, TaskRequest, TaskStatus
from .base import LmspHandler

__all__ = ["OpenApiHandler", "openapi_document"]

OPENAPI_VERSION = "3.1.0"
_SCHEMAS = "#/components/schemas/"
_PREFIX = "/lmsp/v1"

#: Request bodies are validated as the service reads them; everything it sends is serialized.
#: ``Task``, ``Model`` and ``ModelList`` are the exceptions: their wrap serializers (which drop
#: fields that do not apply, such as ``queue_position`` unless queued) hide their fields from a
#: serialization schema, and their validation schemas are the same shape.
_MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (ResponseRequest, "validation"),
    (TaskRequest, "validation"),
    (ChatCompletionRequest, "validation"),
    (ChatCompletion, "serialization"),
    (ChatCompletionChunk, "serialization"),
    (ServiceDocument, "serialization"),
    (ModelList, "validation"),
    (Model, "validation"),
    (Response, "serialization"),
    (Task, "validation"),
    (TaskList, "validation"),
    (Problem, "serialization"),
    *((model, "serialization") for model in events.EVENT_NAMES),
]

_EXTENSION_KEY = r"^(x-[A-Za-z0-9._-]+|[a-z0-9-]+(\.[a-z0-9-]+)+)$"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _SCHEMAS + name}


@functools.cache
def _schemas() -> dict[str, Any]:
    """Every schema of the protocol, as ``components/schemas``."""
    _, top = models_json_schema(_MODELS, ref_template=_SCHEMAS + "{model}")
    schemas: dict[str, Any] = top["$defs"]
    _require_discriminators(schemas)

    request = schemas["ResponseRequest"]["properties"]
    # A bare string is one user message with one input_text part (a "before" validator).
    request["input"] = {
        "anyOf": [
            {"type": "string", "maxLength": MAX_TEXT_CHARS},
            {k: v for k, v in request["input"].items() if k != "title"},
        ],
        "title": "Input",
        "description": "Input items, or a string meaning one user message.",
    }
    # Every event's data also carries its name and its id (11.4).
    for model, name in events.EVENT_NAMES.items():
        event = schemas[model.__name__]
        event["properties"] = {
            "type": {"const": name, "description": "The event's name."},
            "sequence_number": {"type": "integer", "minimum": 1, "description": "Its id."},
            **event["properties"],
        }
        event["required"] = ["type", "sequence_number", *event.get("required", [])]
    request["extensions"]["anyOf"][0]["propertyNames"] = {"pattern": _EXTENSION_KEY}
    request["extensions"]["description"] = "Private extensions under reverse-DNS or x- names."
    # The task's request is a response request (6.1); its ``stream`` is ignored.
    task_request = schemas["TaskRequest"]["properties"]["request"]
    schemas["TaskRequest"]["properties"]["request"] = {
        **_ref("ResponseRequest"),
        "description": task_request.get("description", ""),
    }
    return schemas


def _require_discriminators(schemas: dict[str, Any]) -> None:
    """A tagged union needs its tag: make it required in each of the union's members."""

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            discriminator = node.get("discriminator")
            if isinstance(discriminator, dict):
                tag = discriminator["propertyName"]
                for target in discriminator.get("mapping", {}).values():
                    member = schemas[target.removeprefix(_SCHEMAS)]
                    if tag not in member.setdefault("required", []):
                        member["required"].insert(0, tag)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schemas)


# --- parameters, headers and responses ---------------------------------------------------------

_PARAMETERS: dict[str, dict[str, Any]] = {
    "LMSP-Version": {
        "name": "LMSP-Version",
        "in": "header",
        "required": False,
        "description": "The protocol version the client speaks; missing means 1.0. Another "
        "major, or a later minor than 1.0 → 400 `unsupported_version`.",
        "schema": {"type": "string", "pattern": r"^0*1(\.0+)?$", "examples": [LMSP_VERSION]},
    },
    "Idempotency-Key": {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "description": "The same key, token and body within 24 hours return the first result "
        "again; another body → 422 `idempotency_key_reused`.",
        "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"},
    },
    "Last-Event-ID": {
        "name": "Last-Event-ID",
        "in": "header",
        "required": False,
        "description": "Replay events after this sequence number (`after` wins over it).",
        "schema": {"type": "integer", "minimum": 0},
    },
    "after": {
        "name": "after",
        "in": "query",
        "required": False,
        "description": "Replay events after this sequence number; default 0 (all of them).",
        "schema": {"type": "integer", "minimum": 0},
    },
    "stream": {
        "name": "stream",
        "in": "query",
        "required": False,
        "description": "`true`: the background response's events as server-sent events.",
        "schema": {"type": "string", "enum": ["true", "false"], "default": "false"},
    },
    "starting_after": {
        "name": "starting_after",
        "in": "query",
        "required": False,
        "description": "With `stream=true`: the events after this sequence number.",
        "schema": {"type": "integer", "minimum": 0},
    },
    "limit": {
        "name": "limit",
        "in": "query",
        "required": False,
        "description": "How many tasks, newest first.",
        "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
    },
    "status": {
        "name": "status",
        "in": "query",
        "required": False,
        "description": "Only tasks in this status.",
        "schema": {"type": "string", "enum": list(TaskStatus.__args__)},  # type: ignore[attr-defined]
    },
    "metadata": {
        # OpenAPI names each query parameter exactly; this one stands for every `metadata.KEY`.
        "name": "metadata.{key}",
        "in": "query",
        "required": False,
        "description": "`metadata.KEY=VALUE`: only tasks whose `metadata` has KEY equal to VALUE "
        "(exact match). Give several keys to require all of them; a key given twice, more than "
        "16 keys, a key of 0 or more than 64 characters or a value over 512 → `400 "
        "invalid_request`.",
        "schema": {"type": "string", "maxLength": 512},
    },
}

_PATH_PARAMETERS: dict[str, str] = {
    "model_id": "A model ID, percent-encoded (it may contain `:` and `/`).",
    "response_id": "The ID of a response stored with `store: true`, or of a background one.",
    "task_id": "A task ID.",
}

_HEADERS: dict[str, dict[str, Any]] = {
    "LMSP-Version": {
        "description": "The protocol version of the reply.",
        "required": True,
        "schema": {"type": "string", "const": LMSP_VERSION},
    },
    "WWW-Authenticate": {
        "description": 'The bearer challenge: `Bearer realm="lmsp"`, or for a missing scope '
        '`Bearer error="insufficient_scope", scope="..."`.',
        "schema": {"type": "string", "pattern": "^Bearer "},
    },
    "Allow": {"description": "The methods this path serves.", "schema": {"type": "string"}},
    "Retry-After": {
        "description": "Seconds to wait before trying again.",
        "schema": {"type": "integer", "minimum": 0},
    },
    "Location": {
        "description": "The new task: `{base_url}lmsp/v1/tasks/{task_id}`.",
        "required": True,
        "schema": {"type": "string"},
    },
    "Idempotent-Replayed": {
        "description": "Present on a reply replayed for an `Idempotency-Key`.",
        "schema": {"type": "string", "const": "true"},
    },
    "Cache-Control": {"description": "`no-cache`.", "schema": {"type": "string"}},
}

_ERROR_STATUSES = sorted({status for status, _ in PROBLEM_TYPES.values()})


def _header_refs(*names: str) -> dict[str, Any]:
    return {name: {"$ref": f"#/components/headers/{name}"} for name in ("LMSP-Version", *names)}


#: Headers of error replies: name → whether every reply of that status has it.
_ERROR_HEADERS: dict[int, dict[str, bool]] = {
    401: {"WWW-Authenticate": True},
    403: {"WWW-Authenticate": False},  # only insufficient_scope carries a challenge
    405: {"Allow": True},
    503: {"Retry-After": True},
}


def _error_response(status: int) -> dict[str, Any]:
    """The problem document of one status: the codes of the table that have it."""
    codes = [code for code, (code_status, _) in PROBLEM_TYPES.items() if code_status == status]
    headers = _header_refs()
    for name, required in _ERROR_HEADERS.get(status, {}).items():
        headers[name] = {**_HEADERS[name], "required": required}
    return {
        "description": "A problem document (RFC 9457); `code`: "
        + ", ".join(f"`{code}`" for code in codes)
        + ".",
        "headers": headers,
        "content": {
            "application/problem+json": {
                "schema": {
                    "allOf": [
                        _ref("Problem"),
                        {
                            "type": "object",
                            "properties": {
                                "status": {"const": status},
                                "code": {"enum": codes},
                            },
                        },
                    ]
                }
            }
        },
    }


def _json(schema: dict[str, Any], description: str, *headers: str) -> dict[str, Any]:
    return {
        "description": description,
        "headers": _header_refs(*headers),
        "content": {"application/json": {"schema": schema}},
    }


#: One server-sent event, as OpenAPI 3.2 reads ``schema`` of ``text/event-stream`` (and
#: schemathesis reads it in 3.1): the fields of the event, its ``data`` a JSON document.
_SSE = {
    "schema": {
        "type": "object",
        "required": ["id", "event", "data"],
        "properties": {"id": {"type": "string", "pattern": "^[1-9][0-9]*$"}},
        "oneOf": [
            {
                "properties": {
                    "event": {"const": name},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": _ref(model.__name__),
                    },
                },
            }
            for model, name in events.EVENT_NAMES.items()
        ],
    }
}
_SSE_DESCRIPTION = (
    "Server-sent events, each with an integer `id` (strictly increasing from 1 within the "
    "response), an `event` name and one line of JSON `data` (its schema: `contentSchema` of "
    "the event's alternative); exactly one final event (`response.completed`, "
    "`response.incomplete`, `response.failed`, `response.cancelled` or `error`) ends the "
    "stream. Every event's data also carries `type` (its name) and `sequence_number` (its id). "
    "The first event's frame also carries `retry`; no frame goes without data. While idle the "
    "stream sends `: keep-alive` comment lines."
)


# --- operations -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Operation:
    operation_id: str
    summary: str
    responses: dict[str, Any]
    errors: tuple[int, ...] = ()
    parameters: tuple[str, ...] = ()
    body: str | None = None
    tags: tuple[str, ...] = ()


#: Every endpoint may answer: 400 unsupported_version, 401, 403 (origin or scope), 500.
_COMMON_ERRORS = (400, 401, 403, 500)
_CREATE_ERRORS = (404, 409, 413, 415, 422)

_OPERATIONS: dict[tuple[str, str], _Operation] = {
    ("get", "/"): _Operation(
        "getService",
        "The service document: version, capabilities, scopes",
        {"200": _json(_ref("ServiceDocument"), "The service document.")},
        tags=("service",),
    ),
    ("get", "/openapi.json"): _Operation(
        "getOpenApi",
        "This OpenAPI document",
        {
            "200": _json(
                {"type": "object", "required": ["openapi", "info", "paths"]},
                "The OpenAPI 3.1 document of `/lmsp/v1`.",
            )
        },
        tags=("service",),
    ),
    ("get", "/models"): _Operation(
        "listModels",
        "List the models on this machine",
        {"200": _json(_ref("ModelList"), "The models.")},
        tags=("models",),
    ),
    ("get", "/models/{model_id}"): _Operation(
        "getModel",
        "One model",
        {"200": _json(_ref("Model"), "The model.")},
        errors=(404,),
        tags=("models",),
    ),
    ("post", "/models/{model_id}/load"): _Operation(
        "loadModel",
        "Load a model now, unloading idle ones if it does not fit otherwise",
        {"200": _json(_ref("Model"), "The model, loaded.")},
        errors=(404, 503),
        tags=("models",),
    ),
    ("post", "/models/{model_id}/unload"): _Operation(
        "unloadModel",
        "Unload a model that nothing runs on (a model that is not loaded stays so)",
        {"200": _json(_ref("Model"), "The model, unloaded.")},
        errors=(404, 409),
        tags=("models",),
    ),
    ("post", "/responses"): _Operation(
        "createResponse",
        "Create a response, synchronously or as server-sent events",
        {
            "200": {
                "description": "With `stream: false` the final response object; with "
                "`stream: true` its events. " + _SSE_DESCRIPTION,
                "headers": _header_refs("Idempotent-Replayed", "Cache-Control"),
                "content": {
                    "application/json": {"schema": _ref("Response")},
                    "text/event-stream": _SSE,
                },
            }
        },
        errors=(*_CREATE_ERRORS, 503),
        parameters=("Idempotency-Key",),
        body="ResponseRequest",
        tags=("responses",),
    ),
    ("get", "/responses/{response_id}"): _Operation(
        "getResponse",
        "A stored response, or a background one as it stands (or its events)",
        {
            "200": {
                "description": "The response; with `stream=true` the background response's "
                "events after `starting_after`. " + _SSE_DESCRIPTION,
                "headers": _header_refs("Cache-Control"),
                "content": {
                    "application/json": {"schema": _ref("Response")},
                    "text/event-stream": _SSE,
                },
            }
        },
        errors=(404, 410),
        parameters=("stream", "starting_after"),
        tags=("responses",),
    ),
    ("post", "/responses/{response_id}/cancel"): _Operation(
        "cancelResponse",
        "Cancel a background response (a final one is returned unchanged)",
        {"200": _json(_ref("Response"), "The response as it stands.")},
        errors=(404,),
        tags=("responses",),
    ),
    ("post", "/chat/completions"): _Operation(
        "createChatCompletion",
        "OpenAI's Chat Completions on the same service",
        {
            "200": {
                "description": "With `stream: false` a `chat.completion`; with `stream: true` "
                "server-sent events of `data` alone: `chat.completion.chunk` objects (the last, "
                "with `stream_options.include_usage`, has no choices and the usage), or "
                '`{"error": <problem>}`, then `data: [DONE]`.',
                "headers": _header_refs("Idempotent-Replayed", "Cache-Control"),
                "content": {
                    "application/json": {"schema": _ref("ChatCompletion")},
                    "text/event-stream": {
                        "schema": {
                            "type": "object",
                            "required": ["data"],
                            "properties": {
                                "data": {
                                    "type": "string",
                                    "description": "A `ChatCompletionChunk` as JSON, "
                                    '`{"error": <problem>}` or `[DONE]`.',
                                }
                            },
                        }
                    },
                },
            }
        },
        errors=_CREATE_ERRORS,
        parameters=("Idempotency-Key",),
        body="ChatCompletionRequest",
        tags=("responses",),
    ),
    ("post", "/tasks"): _Operation(
        "createTask",
        "Start a response as a background task",
        {
            "202": _json(
                _ref("Task"),
                "The task (replayed for a known `Idempotency-Key`: as it stands now).",
                "Location",
                "Idempotent-Replayed",
            )
        },
        errors=(*_CREATE_ERRORS, 503),
        parameters=("Idempotency-Key",),
        body="TaskRequest",
        tags=("tasks",),
    ),
    ("get", "/tasks"): _Operation(
        "listTasks",
        "List tasks, newest first",
        {"200": _json(_ref("TaskList"), "The tasks.")},
        parameters=("limit", "status", "metadata"),
        tags=("tasks",),
    ),
    ("get", "/tasks/{task_id}"): _Operation(
        "getTask",
        "A task and, once final, its result",
        {"200": _json(_ref("Task"), "The task.")},
        errors=(404,),
        tags=("tasks",),
    ),
    ("get", "/tasks/{task_id}/events"): _Operation(
        "followTaskEvents",
        "The task's events: replay after the cursor, then live until the final one",
        {
            "200": {
                "description": _SSE_DESCRIPTION,
                "headers": _header_refs("Cache-Control"),
                "content": {"text/event-stream": _SSE},
            }
        },
        errors=(404, 410),
        parameters=("after", "Last-Event-ID"),
        tags=("tasks",),
    ),
    ("post", "/tasks/{task_id}/cancel"): _Operation(
        "cancelTask",
        "Cancel a task (a final task is returned unchanged)",
        {"200": _json(_ref("Task"), "The task.")},
        errors=(404,),
        tags=("tasks",),
    ),
}


def _route_paths() -> Iterable[tuple[str, type[LmspHandler]]]:
    """Each route of ``default_handlers`` as an OpenAPI path relative to ``/lmsp/v1``."""
    from .handlers import NotFoundHandler, default_handlers  # here: handlers imports this

    for pattern, handler in default_handlers:
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
    spec = _OPERATIONS.get((method, path))
    if spec is None:
        raise KeyError(f"{method.upper()} {path} is a route but not described in _OPERATIONS")
    scope = handler.scopes.get(method.upper())
    parameters: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "description": _PATH_PARAMETERS.get(name, ""),
            "schema": {"type": "string", "minLength": 1},
        }
        for name in re.findall(r"\{([^}]+)\}", path)
    ]
    parameters += [{"$ref": f"#/components/parameters/{name}"} for name in spec.parameters]
    parameters.append({"$ref": "#/components/parameters/LMSP-Version"})
    operation: dict[str, Any] = {
        "operationId": spec.operation_id,
        "summary": spec.summary,
        "tags": list(spec.tags),
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
            "content": {"application/json": {"schema": _ref(spec.body)}},
        }
    responses = dict(spec.responses)
    for status in sorted({*_COMMON_ERRORS, *spec.errors}):
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
        ],
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "parameters": _PARAMETERS,
            "headers": _HEADERS,
            "responses": {
                f"Problem{status}": _error_response(status) for status in _ERROR_STATUSES
            },
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
def _document_json(server_url: str) -> str:
    return json.dumps(openapi_document(server_url))


class OpenApiHandler(LmspHandler):
    """``GET /lmsp/v1/openapi.json``: this API's OpenAPI document (a valid token, no scope)."""

    def get(self) -> None:
        self.finish(_document_json(self.base_url))
