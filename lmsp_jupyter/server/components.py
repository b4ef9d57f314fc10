"""The components of the OpenAPI document of ``/lmsp/v1``: the protocol's schemas (from its
pydantic models), the parameters, the reply headers and the problem documents of each status."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from ..protocol import events
from ..protocol.chat import ChatCompletionRequest
from ..protocol.chat_answers import ChatCompletion, ChatCompletionChunk
from ..protocol.completions import CompletionRequest, TextCompletion
from ..protocol.embeddings import EmbeddingList, EmbeddingRequest
from ..protocol.errors import PROBLEM_TYPES, Problem
from ..protocol.items import MAX_TEXT_CHARS
from ..protocol.mcp import McpServerList
from ..protocol.models import (
    EXTENSION_KEY,
    EXTENSION_KEY_PATTERN,
    LMSP_VERSION,
    Model,
    ModelList,
    ServiceDocument,
)
from ..protocol.requests import ResponseRequest
from ..protocol.responses import Response
from ..protocol.tasks import Task, TaskList, TaskRequest, TaskStatus
from .operations import SCHEMAS, header_refs, ref

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
    (CompletionRequest, "validation"),
    (TextCompletion, "serialization"),
    (EmbeddingRequest, "validation"),
    (EmbeddingList, "serialization"),
    (ServiceDocument, "serialization"),
    (ModelList, "validation"),
    (Model, "validation"),
    (Response, "serialization"),
    (Task, "validation"),
    (TaskList, "validation"),
    (McpServerList, "serialization"),
    (Problem, "serialization"),
    *((model, "serialization") for model in events.EVENT_NAMES),
]


@functools.cache
def protocol_schemas() -> dict[str, Any]:
    """Every schema of the protocol, as ``components/schemas``."""
    _, top = models_json_schema(_MODELS, ref_template=SCHEMAS + "{model}")
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
    request["extensions"]["anyOf"][0]["propertyNames"] = {"pattern": EXTENSION_KEY_PATTERN}
    request["extensions"]["description"] = "Private extensions under reverse-DNS or x- names."
    request["extensions"]["anyOf"][0]["properties"] = {
        EXTENSION_KEY: {
            "type": "object",
            "description": "This service's own; other keys in it are ignored.",
            "properties": {
                "keep_alive_seconds": {
                    "type": "number",
                    "description": "How long the model stays loaded once idle after this "
                    "request (0: unloaded at once, negative: not for being idle).",
                },
                "prediction": {
                    **ref("Prediction"),
                    "description": "The answer as expected, mostly (Chat Completions' "
                    "prediction): verified a stretch at a time, the text is the same.",
                },
                "speculation": {
                    "type": "boolean",
                    "default": True,
                    "description": "false: no drafted tokens are verified for this request.",
                },
            },
        }
    }
    # The task's request is a response request (6.1); its ``stream`` is ignored.
    task_request = schemas["TaskRequest"]["properties"]["request"]
    schemas["TaskRequest"]["properties"]["request"] = {
        **ref("ResponseRequest"),
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
                    member = schemas[target.removeprefix(SCHEMAS)]
                    if tag not in member.setdefault("required", []):
                        member["required"].insert(0, tag)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schemas)


# --- parameters, headers and responses ---------------------------------------------------------

PARAMETERS: dict[str, dict[str, Any]] = {
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

PATH_PARAMETERS: dict[str, str] = {
    "model_id": "A model ID, percent-encoded (it may contain `:` and `/`).",
    "response_id": "The ID of a response stored with `store: true`, or of a background one.",
    "task_id": "A task ID.",
}

HEADERS: dict[str, dict[str, Any]] = {
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

ERROR_STATUSES = sorted({status for status, _ in PROBLEM_TYPES.values()})

#: Headers of error replies: name → whether every reply of that status has it.
_ERROR_HEADERS: dict[int, dict[str, bool]] = {
    401: {"WWW-Authenticate": True},
    403: {"WWW-Authenticate": False},  # only insufficient_scope carries a challenge
    405: {"Allow": True},
    429: {"Retry-After": True},
    503: {"Retry-After": True},
}


def error_response(status: int) -> dict[str, Any]:
    """The problem document of one status: the codes of the table that have it."""
    codes = [code for code, (code_status, _) in PROBLEM_TYPES.items() if code_status == status]
    headers = header_refs()
    for name, required in _ERROR_HEADERS.get(status, {}).items():
        headers[name] = {**HEADERS[name], "required": required}
    return {
        "description": "A problem document (RFC 9457); `code`: "
        + ", ".join(f"`{code}`" for code in codes)
        + ".",
        "headers": headers,
        "content": {
            "application/problem+json": {
                "schema": {
                    "allOf": [
                        ref("Problem"),
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
