"""What an operation of ``/lmsp/v1`` is, as its handler declares it for the OpenAPI document.

Each handler of :data:`lmsp_jupyter.server.routes.default_handlers` names its operations in
``operations`` (verb → :class:`Operation`): the one place for an operation's id, summary, scope,
parameters, body and replies. :mod:`lmsp_jupyter.server.openapi` walks the routes and reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocol import events
from ..protocol.models import Scope

SCHEMAS = "#/components/schemas/"

#: Every endpoint may answer: 400 unsupported_version, 401, 403 (origin or scope), 500.
COMMON_ERRORS = (400, 401, 403, 500)
#: What a creating ``POST`` may answer besides: unknown model, busy key, body too large, not
#: JSON, invalid or reused key, the caller over its per-owner limit (``rate_limited``).
CREATE_ERRORS = (404, 409, 413, 415, 422, 429)


@dataclass(frozen=True)
class Operation:
    """One operation: its OpenAPI facts and the scope it needs (``None``: a valid token)."""

    operation_id: str
    summary: str
    tag: str
    responses: dict[str, Any]
    scope: Scope | None = None
    #: Error statuses besides :data:`COMMON_ERRORS`.
    errors: tuple[int, ...] = ()
    #: Names of ``components/parameters`` (path parameters come from the route).
    parameters: tuple[str, ...] = ()
    #: The name of the request body's schema.
    body: str | None = None


def ref(name: str) -> dict[str, str]:
    """A reference to the schema ``name``."""
    return {"$ref": SCHEMAS + name}


def header_refs(*names: str) -> dict[str, Any]:
    """References to reply headers: ``LMSP-Version`` (every reply has it), then ``names``."""
    return {name: {"$ref": f"#/components/headers/{name}"} for name in ("LMSP-Version", *names)}


def json_reply(schema: dict[str, Any], description: str, *headers: str) -> dict[str, Any]:
    """A JSON reply of ``schema`` with ``headers``."""
    return {
        "description": description,
        "headers": header_refs(*headers),
        "content": {"application/json": {"schema": schema}},
    }


def events_reply(description: str, json_schema: str | None = None, *headers: str) -> dict[str, Any]:
    """A reply of response events as SSE (after ``description``), or with ``json_schema`` as JSON
    too (the ``stream`` of the request says which)."""
    content: dict[str, Any] = {}
    if json_schema is not None:
        content["application/json"] = {"schema": ref(json_schema)}
    content["text/event-stream"] = SSE_EVENTS
    return {
        "description": f"{description} {SSE_DESCRIPTION}".strip(),
        "headers": header_refs(*headers, "Cache-Control"),
        "content": content,
    }


#: One server-sent event, as OpenAPI 3.2 reads ``schema`` of ``text/event-stream`` (and
#: schemathesis reads it in 3.1): the fields of the event, its ``data`` a JSON document.
SSE_EVENTS = {
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
                        "contentSchema": ref(model.__name__),
                    },
                },
            }
            for model, name in events.EVENT_NAMES.items()
        ],
    }
}
SSE_DESCRIPTION = (
    "Server-sent events, each with an integer `id` (strictly increasing from 1 within the "
    "response), an `event` name and one line of JSON `data` (its schema: `contentSchema` of "
    "the event's alternative); exactly one final event (`response.completed`, "
    "`response.incomplete`, `response.failed`, `response.cancelled` or `error`) ends the "
    "stream. Every event's data also carries `type` (its name) and `sequence_number` (its id). "
    "The first event's frame also carries `retry`; no frame goes without data. While idle the "
    "stream sends `: keep-alive` comment lines."
)


def data_events_reply(description: str, json_schema: str, data: str) -> dict[str, Any]:
    """A reply of ``json_schema`` as JSON, or as OpenAI streams it: SSE of ``data`` alone
    (``data`` says what each is), ending with ``data: [DONE]``."""
    return {
        "description": description,
        "headers": header_refs("Idempotent-Replayed", "Cache-Control"),
        "content": {
            "application/json": {"schema": ref(json_schema)},
            "text/event-stream": {
                "schema": {
                    "type": "object",
                    "required": ["data"],
                    "properties": {"data": {"type": "string", "description": data}},
                }
            },
        },
    }


#: A chat completion, or its chunks as SSE of ``data`` alone.
CHAT_REPLY = data_events_reply(
    "With `stream: false` a `chat.completion`; with `stream: true` server-sent events of "
    "`data` alone: `chat.completion.chunk` objects (the last, with "
    '`stream_options.include_usage`, has no choices and the usage), or `{"error": <problem>}`, '
    "then `data: [DONE]`.",
    "ChatCompletion",
    'A `ChatCompletionChunk` as JSON, `{"error": <problem>}` or `[DONE]`.',
)

#: A text completion, or its chunks as SSE of ``data`` alone.
COMPLETION_REPLY = data_events_reply(
    "With `stream: false` a `text_completion`; with `stream: true` server-sent events of "
    "`data` alone: `text_completion` chunks, each with the text it adds (the last, with "
    '`stream_options.include_usage`, has no choices and the usage), or `{"error": <problem>}`, '
    "then `data: [DONE]`.",
    "TextCompletion",
    'A `TextCompletion` chunk as JSON, `{"error": <problem>}` or `[DONE]`.',
)
