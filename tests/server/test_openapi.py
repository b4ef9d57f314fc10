"""The OpenAPI document of ``/lmsp/v1``: valid OpenAPI 3.1, served, and fuzzed with schemathesis.

The fuzzing run sends a few thousand generated requests (positive and negative) to the live
server and checks every reply: no 5xx, every error a problem document with a code of the spec's
table, and status codes, media types, headers, bodies and SSE events as the document says.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from lmsp_jupyter.protocol.errors import EXTENSION_CODES, PROBLEM_TYPES
from lmsp_jupyter.protocol.events import EVENT_NAMES, FINAL_EVENTS
from lmsp_jupyter.server.base import LmspHandler
from lmsp_jupyter.server.document_handlers import NotFoundHandler, OpenApiHandler
from lmsp_jupyter.server.hub import usage_handlers
from lmsp_jupyter.server.openapi import openapi_document
from lmsp_jupyter.server.routes import default_handlers
from tests.conftest import MODEL, LiveServer
from tests.helpers import eventually
from tests.spec import SPEC_STATUSES

Case = schemathesis.Case[Any]
Operation = schemathesis.APIOperation[Any, Any, Any, Any]

#: The spec's problem codes and this service's own (a per-owner limit).
SERVED_STATUSES = {**SPEC_STATUSES, **{code: PROBLEM_TYPES[code][0] for code in EXTENSION_CODES}}


VERBS = ("get", "head", "post", "put", "patch", "delete")
#: ``LMSP_FUZZ_LONG=1`` runs the long form by hand (``docs/reliability.md``): ≥ 10,000 requests.
LONG = os.environ.get("LMSP_FUZZ_LONG") == "1"
#: Generated requests per operation and generation mode (positive, negative).
MAX_EXAMPLES = 600 if LONG else 100
MIN_REQUESTS = 10_000 if LONG else 2000
#: Output tokens a generated request may ask for, so that the real model stays cheap.
MAX_OUTPUT_TOKENS = 4
#: Generated requests per operation and mode that name the bundled model (others get 404).
MODEL_CALLS_PER_OPERATION = 15


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


# --- fuzzing --------------------------------------------------------------------------------


@dataclass
class FuzzRun:
    """What the schemathesis run sent and which checks failed (check name → failures)."""

    requests: int = 0
    by_status: Counter[int] = field(default_factory=Counter)
    by_operation: Counter[str] = field(default_factory=Counter)
    statuses_by_operation: defaultdict[str, Counter[int]] = field(
        default_factory=lambda: defaultdict(Counter)
    )
    seconds_by_operation: dict[str, float] = field(default_factory=dict)
    model_calls: int = 0
    failures: defaultdict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    seconds: float = 0.0

    def summary(self) -> str:
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(self.by_status.items()))
        operations = "\n".join(
            f"  {op}: {n} in {self.seconds_by_operation[op]:.1f} s ("
            + ", ".join(f"{s}: {c}" for s, c in sorted(self.statuses_by_operation[op].items()))
            + ")"
            for op, n in sorted(self.by_operation.items())
        )
        failed = "\n".join(f"  {check}: {len(items)}" for check, items in self.failures.items())
        return (
            f"schemathesis: {self.requests} requests in {self.seconds:.0f} s, "
            f"{self.model_calls} of them naming the bundled model\n"
            f"by status: {statuses}\nby operation:\n{operations}\n"
            f"failures by check:\n{failed or '  none'}"
        )


def problem_document(response: schemathesis.Response, case: Case) -> None:
    """An error is ``application/problem+json`` with a code of the spec's table and its status."""
    if response.status_code < 400:
        return
    media_type = (response.headers.get("content-type") or [""])[0].split(";")[0].strip()
    assert media_type == "application/problem+json", f"error as {media_type!r}"
    problem = json.loads(response.content)
    assert isinstance(problem, dict), problem
    assert problem.get("code") in SPEC_STATUSES, f"code {problem.get('code')!r} is not in the table"
    assert SPEC_STATUSES[problem["code"]] == response.status_code == problem.get("status"), problem
    assert "Traceback" not in response.text


def sse_stream(response: schemathesis.Response, case: Case) -> None:
    """A stream: consecutive ids, documented events, and one final event that ends it.

    (The data of each event is checked against its schema by ``response_schema_conformance``.)
    """
    media_type = (response.headers.get("content-type") or [""])[0].split(";")[0].strip()
    if response.status_code != 200 or media_type != "text/event-stream":
        return
    if case.operation.path in ("/chat/completions", "/completions"):
        chat_stream(response.text)
        return
    blocks = [b for b in response.text.split("\n\n") if b]
    ids, names = [], []
    for number, block in enumerate(blocks):
        lines = [line for line in block.split("\n") if not line.startswith(":")]
        fields = dict(line.split(": ", 1) for line in lines)
        if number == 0:  # no frame without data: retry travels in the first event's frame
            assert fields.pop("retry", None) == "2000", block
        assert set(fields) == {"id", "event", "data"}, block
        assert fields["event"] in EVENT_NAMES.values(), f"undocumented event {fields['event']}"
        ids.append(int(fields["id"]))
        names.append(fields["event"])
    assert ids == list(range(ids[0], ids[0] + len(ids))) if ids else True, ids
    if case.operation.path == "/responses":
        assert ids and ids[0] == 1, ids
    if names:  # a task's stream after its last event is empty
        assert names[-1] in FINAL_EVENTS and not set(names[:-1]) & FINAL_EVENTS, names


def chat_stream(text: str) -> None:
    """A (chat) completion stream: frames of ``data`` alone (retry in the first), chunks, then
    ``[DONE]``."""
    frames = []
    for number, block in enumerate(b for b in text.split("\n\n") if b):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if not line.startswith(":"))
        if number == 0:
            assert fields.pop("retry", None) == "2000", block
        assert set(fields) == {"data"}, block
        frames.append(fields["data"])
    assert frames[-1] == "[DONE]" and "[DONE]" not in frames[:-1], frames[-3:]
    for frame in frames[:-1]:
        data = json.loads(frame)
        chunks = ("chat.completion.chunk", "text_completion")
        assert data.get("object") in chunks or set(data) == {"error"}, data


def cheapen(body: Any, use_model: bool) -> bool:
    """Cap ``max_output_tokens`` of a response request; maybe name the bundled model (stored)."""
    if not isinstance(body, dict):
        return False
    tokens = body.get("max_output_tokens")
    if tokens is None or (type(tokens) is int and tokens > MAX_OUTPUT_TOKENS):
        body["max_output_tokens"] = MAX_OUTPUT_TOKENS
    if use_model:
        body["model"] = MODEL
        body.setdefault("store", True)
    return use_model


def cheapen_chat(body: Any, use_model: bool) -> bool:
    """Cap the tokens of a chat request; maybe name the bundled model."""
    if isinstance(body, dict):
        body.pop("max_tokens", None)
    return cheapen_openai(body, use_model, "max_completion_tokens")


def cheapen_openai(body: Any, use_model: bool, field: str = "max_tokens") -> bool:
    """Cap the tokens (``field``) of an OpenAI request; maybe name the bundled model."""
    if not isinstance(body, dict):
        return False
    tokens = body.get(field)
    if tokens is None or (type(tokens) is int and tokens > MAX_OUTPUT_TOKENS):
        body[field] = MAX_OUTPUT_TOKENS
    if use_model:
        body["model"] = MODEL
    return use_model


def cancel_leftover_tasks(client: httpx.Client) -> None:
    """Leave no task running for the tests after this one (bounded wait)."""

    def none_running() -> bool:
        running = [
            task["id"]
            for status in ("queued", "in_progress")
            for task in client.get("/tasks", params={"status": status, "limit": 100}).json()["data"]
        ]
        for task_id in running:
            client.post(f"/tasks/{task_id}/cancel")
        return not running

    eventually(none_running, within=120, interval=0.2, what="no task running after the fuzzing")


#: The schemathesis checks run on every reply. Left out, as they cannot hold by design:
#: ``positive_data_acceptance`` (valid requests legitimately get 404 for generated IDs and
#: models, 422 for a generated Idempotency-Key used twice, 400 for a ``tool_choice`` naming no
#: tool), ``negative_data_rejection`` (OpenAPI has no way to forbid unknown query parameters
#: or headers, which the service ignores as HTTP services do, and this test rewrites bodies and
#: path IDs of generated cases), ``max_response_time`` (a shared 2-core machine), and the
#: stateful ``use_after_free``/``ensure_resource_availability``/``ignored_auth`` (no links; the
#: negative cases already send missing and wrong credentials).
CHECKS = {
    check.__name__: check
    for check in (
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
    )
}


def _stored(body: Any) -> bool:
    return isinstance(body, dict) and body.get("store") is True


class Fuzzer:
    """Sends generated cases to the live server and runs every check on each reply."""

    def __init__(self, live_server: LiveServer, document: dict[str, Any]) -> None:
        self.base_url = live_server.lmsp
        self.auth = {"Authorization": f"Bearer {live_server.token}"}
        self.own_checks: dict[str, Callable[[schemathesis.Response, Any], None]] = {
            "problem_document": problem_document,
            "sse_stream": sse_stream,
        }
        self.run = FuzzRun()
        self.model_calls: Counter[str] = Counter()
        #: IDs the server handed out, put into some later cases so that they reach real objects.
        self.known: dict[str, list[str]] = {"model_id": [MODEL], "task_id": [], "response_id": []}

    def prepare(self, case: Case, dice: int, label: str) -> None:
        """Keep model calls cheap; sometimes use the bundled model or a known ID."""
        use_model = dice == 0 and self.model_calls[label] < MODEL_CALLS_PER_OPERATION
        if case.method == "POST" and case.operation.path == "/responses":
            self.model_calls[label] += cheapen(case.body, use_model)
        elif case.method == "POST" and case.operation.path == "/chat/completions":
            self.model_calls[label] += cheapen_chat(case.body, use_model)
        elif case.method == "POST" and case.operation.path == "/completions":
            self.model_calls[label] += cheapen_openai(case.body, use_model)
        elif case.method == "POST" and isinstance(case.body, dict):  # POST /tasks
            self.model_calls[label] += cheapen(case.body.get("request"), use_model)
        parameters = case.path_parameters or {}
        for name, ids in self.known.items():
            if name in parameters and ids and dice < 2:
                parameters[name] = ids[-1 - dice] if len(ids) > dice else ids[-1]

    def remember(self, case: Case, response: schemathesis.Response) -> None:
        if response.status_code not in (200, 202) or not response.content.startswith(b"{"):
            return
        body = json.loads(response.content)
        if body.get("object") == "task":
            self.known["task_id"].append(body["id"])
        elif body.get("object") == "response" and _stored(case.body):
            self.known["response_id"].append(body["id"])

    def send(self, case: Case, dice: int, label: str) -> None:
        self.prepare(case, dice, label)
        response = case.call(base_url=self.base_url, headers=self.auth, timeout=120)
        run = self.run
        run.requests += 1
        run.by_status[response.status_code] += 1
        run.by_operation[label] += 1
        run.statuses_by_operation[label][response.status_code] += 1
        self.remember(case, response)
        for name, check in CHECKS.items():
            try:
                case.validate_response(response, checks=[check], headers=self.auth)
            except (Exception, BaseExceptionGroup) as failure:  # schemathesis' FailureGroup
                run.failures[name].append(f"{case.as_curl_command()}\n{failure}"[:4000])
        for name, own in self.own_checks.items():
            try:
                own(response, case)
            except Exception as failure:
                request = f"{case.method} {response.request.url} {response.request.body!r}"
                run.failures[name].append(
                    f"{request[:1000]}\n→ {response.status_code} {response.text[:500]}\n{failure!r}"
                )

    def operation(self, operation: Operation, mode: GenerationMode) -> None:
        label = f"{operation.label} ({mode.value})"

        @settings(
            max_examples=MAX_EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
            verbosity=Verbosity.quiet,
        )
        @given(case=operation.as_strategy(generation_mode=mode), dice=st.integers(0, 7))
        def send(case: Case, dice: int) -> None:
            self.send(case, dice, label)

        began = time.monotonic()
        send()
        self.run.seconds_by_operation[label] = time.monotonic() - began


@pytest.fixture(scope="module")
def fuzz_run(live_server: LiveServer) -> FuzzRun:
    """Every operation of the served document, ``MAX_EXAMPLES`` cases per generation mode."""
    with live_server.client() as client:
        served: dict[str, Any] = client.get("/openapi.json").raise_for_status().json()
    # From the dict, not the URL: schemathesis leaves out the operation that served the schema.
    schema = schemathesis.openapi.from_dict(served)
    fuzzer = Fuzzer(live_server, served)
    started = time.monotonic()
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # the served document has no invalid operation
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzzer.operation(result.ok(), mode)
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
