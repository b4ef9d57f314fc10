"""The OpenAPI document of ``/lmsp/v1``: valid OpenAPI 3.1, served, and fuzzed with schemathesis.

The fuzzing slice sends about a thousand generated requests (positive and negative) to the live
server on the bundled model and checks every reply (tests/server/fuzzing.py): no 5xx, every
error a problem document with a code of the spec's table, and status codes, media types,
headers, bodies and SSE events as the document says. The bulk of the fuzzing runs on the
scripted engine, in batches, with Ollama's API too: tests/server/test_fuzz.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
import schemathesis
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from lmsp_jupyter.protocol.errors import EXTENSION_CODES, PROBLEM_TYPES
from lmsp_jupyter.protocol.events import EVENT_NAMES
from lmsp_jupyter.server.base import LmspHandler
from lmsp_jupyter.server.document_handlers import NotFoundHandler, OpenApiHandler
from lmsp_jupyter.server.hub import usage_handlers
from lmsp_jupyter.server.openapi import openapi_document
from lmsp_jupyter.server.routes import default_handlers
from tests.conftest import MODEL, LiveServer
from tests.server.fuzzing import CHECKS, Fuzzer, FuzzRun, cancel_leftover_tasks
from tests.spec import SPEC_STATUSES

#: The spec's problem codes and this service's own (a per-owner limit).
SERVED_STATUSES = {**SPEC_STATUSES, **{code: PROBLEM_TYPES[code][0] for code in EXTENSION_CODES}}


VERBS = ("get", "head", "post", "put", "patch", "delete")
#: ``LMSP_FUZZ_LONG=1`` runs the long form by hand (``docs/reliability.md``): ≥ 10,000 requests.
LONG = os.environ.get("LMSP_FUZZ_LONG") == "1"
#: Generated requests per operation and generation mode (positive, negative). The CI slice on
#: the bundled model is small: the scripted engine's batches (tests/server/test_fuzz.py) send
#: the bulk.
MAX_EXAMPLES = 600 if LONG else 30
MIN_REQUESTS = 10_000 if LONG else 1000


# --- the document ---------------------------------------------------------------------------


def implemented_verbs(handler: type[LmspHandler]) -> set[str]:
    """The methods a handler serves (the others answer 405)."""
    return {verb for verb in VERBS if getattr(handler, verb) is not getattr(LmspHandler, verb)}


def expected_operations() -> dict[str, set[str]]:
    """Each route of ``default_handlers`` but the catch-all, and the usage route, as a path
    under ``/lmsp/v1``."""
    operations: dict[str, set[str]] = {}
    for pattern, handler in [*default_handlers, *usage_handlers]:
        if handler is NotFoundHandler:
            continue
        path = re.sub(r"\([^)]*\)", "{}", pattern.removeprefix("/lmsp/v1").removesuffix("/?"))
        operations[path or "/"] = implemented_verbs(handler)
    return operations


def resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" or (key == "mapping" and isinstance(value, dict)):
                yield from [value] if key == "$ref" else value.values()
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def schema_validator(document: dict[str, Any], ref: str) -> jsonschema.Draft202012Validator:
    """A JSON Schema validator of one component, its references resolved in ``document``."""
    return jsonschema.Draft202012Validator({"$ref": ref, "components": document["components"]})


def test_document_is_valid_openapi_3_1() -> None:
    document = json.loads(json.dumps(openapi_document("/jp/")))  # plain JSON, as served
    assert document["openapi"] == "3.1.0"
    errors = [error.message for error in OPENAPI_31_VALIDATOR.iter_errors(document)]
    assert errors == []
    assert document["servers"] == [
        {"url": "/jp/lmsp/v1", "description": "LMSP on this Jupyter server."}
    ]
    for ref in refs(document):
        assert resolve(document, ref) is not None, ref
    for schema in document["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)


def test_document_has_every_route_with_its_methods_and_scope() -> None:
    document = openapi_document()
    assert document["servers"][0]["url"] == "/lmsp/v1"
    paths = {re.sub(r"\{[^}]+\}", "{}", path): item for path, item in document["paths"].items()}
    expected = expected_operations()
    assert {path: set(item) for path, item in paths.items()} == expected
    handlers = {
        re.sub(r"\([^)]*\)", "{}", pattern.removeprefix("/lmsp/v1").removesuffix("/?")) or "/": h
        for pattern, h in [*default_handlers, *usage_handlers]
        if h is not NotFoundHandler
    }
    for path, item in paths.items():
        for verb, operation in item.items():
            scope = handlers[path].scopes.get(verb.upper())
            assert operation["security"] == [{"bearer": [scope] if scope else []}], (verb, path)
            assert "500" in operation["responses"]


def test_document_parameters_and_responses() -> None:
    document = openapi_document()
    paths = document["paths"]
    parameters = document["components"]["parameters"]

    def parameter_names(operation: dict[str, Any]) -> dict[str, str]:
        names = {}
        for parameter in operation["parameters"]:
            if "$ref" in parameter:
                parameter = resolve(document, parameter["$ref"])
            names[parameter["name"]] = parameter["in"]
        return names

    assert parameter_names(paths["/models/{model_id}"]["get"]) == {
        "model_id": "path",
        "LMSP-Version": "header",
    }
    assert parameter_names(paths["/tasks"]["get"]) == {
        "limit": "query",
        "status": "query",
        "metadata.{key}": "query",
        "LMSP-Version": "header",
    }
    assert parameters["limit"]["schema"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "default": 20,
    }
    assert parameters["status"]["schema"]["enum"] == [
        "queued",
        "in_progress",
        "completed",
        "incomplete",
        "failed",
        "cancelled",
    ]
    assert parameters["after"]["schema"] == {"type": "integer", "minimum": 0}
    assert set(parameter_names(paths["/tasks/{task_id}/events"]["get"])) == {
        "task_id",
        "after",
        "Last-Event-ID",
        "LMSP-Version",
    }
    for path in ("/responses", "/tasks"):
        post = paths[path]["post"]
        assert "Idempotency-Key" in parameter_names(post)
        assert set(post["requestBody"]["content"]) == {"application/json"}
        assert {"409", "413", "415", "422"} <= set(post["responses"])
    assert "503" in paths["/tasks"]["post"]["responses"]
    assert "202" in paths["/tasks"]["post"]["responses"]
    assert set(paths["/responses"]["post"]["responses"]["200"]["content"]) == {
        "application/json",
        "text/event-stream",
    }
    assert set(paths["/tasks/{task_id}/events"]["get"]["responses"]["200"]["content"]) == {
        "text/event-stream"
    }
    assert "410" in paths["/tasks/{task_id}/events"]["get"]["responses"]
    stream = paths["/tasks/{task_id}/events"]["get"]["responses"]["200"]["content"]
    events = stream["text/event-stream"]["schema"]["oneOf"]
    assert {e["properties"]["event"]["const"] for e in events} == set(EVENT_NAMES.values())
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for name, response in document["components"]["responses"].items():
        status = int(name.removeprefix("Problem"))
        problem = response["content"]["application/problem+json"]["schema"]
        assert problem["allOf"][0] == {"$ref": "#/components/schemas/Problem"}
        codes = problem["allOf"][1]["properties"]["code"]["enum"]
        assert codes == [code for code, number in SERVED_STATUSES.items() if number == status]


def test_usage_and_the_per_owner_limit_are_documented() -> None:
    document = openapi_document()
    paths = document["paths"]
    usage = paths["/x-lmsp-jupyter/usage"]["get"]
    assert usage["security"] == [{"bearer": ["responses:read"]}]
    listed = usage["responses"]["200"]["content"]["application/json"]["schema"]
    row = {"owner": "hub:alice", "responses": 2, "input_tokens": 9, "output_tokens": 7}
    jsonschema.validate({"object": "list", "data": [row]}, listed)
    for path in ("/responses", "/chat/completions", "/completions", "/tasks"):
        refused = paths[path]["post"]["responses"]["429"]
        assert refused == {"$ref": "#/components/responses/Problem429"}, path
    limited = document["components"]["responses"]["Problem429"]
    assert limited["headers"]["Retry-After"]["required"] is True
    codes = limited["content"]["application/problem+json"]["schema"]["allOf"][1]
    assert codes["properties"]["code"]["enum"] == ["rate_limited"]


def test_model_load_and_unload_are_documented_with_their_scope_and_errors() -> None:
    document = openapi_document()
    paths = document["paths"]
    load = paths["/models/{model_id}/load"]["post"]
    unload = paths["/models/{model_id}/unload"]["post"]
    assert load["security"] == unload["security"] == [{"bearer": ["models:write"]}]
    assert set(load["responses"]) == {"200", "400", "401", "403", "404", "500", "503"}
    assert set(unload["responses"]) == {"200", "400", "401", "403", "404", "409", "500"}
    assert "503" in paths["/responses"]["post"]["responses"]
    conflict = document["components"]["responses"]["Problem409"]["description"]
    assert "`model_busy`" in conflict
    model = document["components"]["schemas"]["Model"]
    assert model["properties"]["status"]["enum"] == [
        "available",
        "loading",
        "loaded",
        "unavailable",
    ]
    assert {"memory_bytes", "loaded_at", "expires_at"} <= set(model["properties"])
    validator = schema_validator(document, "#/components/schemas/ModelList")
    validator.validate(
        {
            "object": "list",
            "data": [
                {
                    "id": MODEL,
                    "object": "model",
                    "owned_by": "local",
                    "context_length": 8192,
                    "capabilities": ["streaming"],
                    "status": "loaded",
                    "format": "gguf",
                    "size_bytes": 1,
                    "memory_bytes": 2,
                    "loaded_at": 3,
                    "expires_at": None,
                }
            ],
            "extensions": {"x-lmsp-jupyter": {"notices": ["model directory /x does not exist"]}},
        }
    )


def test_problem_table_is_the_spec_table_and_this_services_own_codes() -> None:
    assert {code: status for code, (status, _) in PROBLEM_TYPES.items()} == SERVED_STATUSES


def test_document_schemas_accept_what_the_service_sends() -> None:
    document = openapi_document()
    task = {
        "id": "task_01J8M6Q4W2T7N5R3V9X1Z8B0DF",
        "object": "task",
        "type": "response",
        "status": "queued",
        "created_at": 1794200000,
        "started_at": None,
        "completed_at": None,
        "response_id": "resp_01J8M6Q4W2T7N5R3V9X1Z8B0DF",
        "last_event_id": 0,
        "result": None,
        "error": None,
        "queue_position": 1,
    }
    schema_validator(document, "#/components/schemas/Task").validate(task)
    request = schema_validator(document, "#/components/schemas/ResponseRequest")
    request.validate({"model": MODEL, "input": "Hi"})
    request.validate(
        {"model": MODEL, "input": [{"type": "message", "role": "user", "content": "x"}]}
    )
    with pytest.raises(jsonschema.ValidationError):
        request.validate({"model": MODEL, "input": [{"role": "user", "content": "x"}]})
    with pytest.raises(jsonschema.ValidationError):
        request.validate({"model": MODEL, "input": "Hi", "extensions": {"bad key": 1}})
    tasks = schema_validator(document, "#/components/schemas/TaskRequest")
    with pytest.raises(jsonschema.ValidationError):
        tasks.validate({"type": "response", "request": {"model": MODEL}})


def test_served_document_is_the_document(live_server: LiveServer) -> None:
    with live_server.client() as client:
        response = client.get("/openapi.json")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/json")
        assert response.headers["LMSP-Version"] == "1.0"
        assert response.json() == json.loads(json.dumps(openapi_document("/jp/")))
    anonymous = httpx.get(f"{live_server.lmsp}/openapi.json")
    assert anonymous.status_code == 401
    assert anonymous.headers["content-type"] == "application/problem+json"
    assert OpenApiHandler.scopes == {}


@pytest.fixture(scope="module")
def fuzz_run(live_server: LiveServer) -> FuzzRun:
    """Every operation of the served document, ``MAX_EXAMPLES`` cases per generation mode."""
    with live_server.client() as client:
        served: dict[str, Any] = client.get("/openapi.json").raise_for_status().json()
    # From the dict, not the URL: schemathesis leaves out the operation that served the schema.
    schema = schemathesis.openapi.from_dict(served)
    started = time.monotonic()
    with contextlib.closing(Fuzzer(live_server.lmsp, live_server.token)) as fuzzer:
        for result in schema.get_all_operations():
            assert isinstance(result, Ok), result  # the served document has no invalid operation
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                fuzzer.operation(result.ok(), mode, MAX_EXAMPLES)
    run = fuzzer.run
    run.seconds = time.monotonic() - started
    run.model_calls = sum(fuzzer.model_calls.values())
    with live_server.client() as client:
        cancel_leftover_tasks(client)
    print("\n" + run.summary())
    for check, failures in run.failures.items():
        print(f"\n--- the first failures of {check} ---")
        for failure in failures[:3]:
            print(failure)
    return run


def test_fuzzing_sends_enough_requests(fuzz_run: FuzzRun) -> None:
    assert fuzz_run.requests >= MIN_REQUESTS, fuzz_run.summary()
    assert fuzz_run.model_calls > 0
    assert set(fuzz_run.by_status) - {200, 202} and {200, 202} <= set(fuzz_run.by_status)


@pytest.mark.parametrize(
    "check",
    [*CHECKS, "problem_document", "sse_stream"],
)
def test_fuzzing_check(fuzz_run: FuzzRun, check: str) -> None:
    failures = fuzz_run.failures.get(check, [])
    assert not failures, f"{len(failures)} failures; the first:\n{failures[0]}"
