"""Schemathesis against a live server, shared by the fuzzing tests: the OpenAPI document's slice
on the bundled model (tests/server/test_openapi.py) and the batches on the scripted engine
(tests/server/test_fuzz.py). :class:`Fuzzer` sends each generated case, keeps model calls cheap,
and runs every check on each reply: no 5xx, every error a problem document with a code of the
spec's table, and status codes, media types, headers, bodies and SSE events as the document
says."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from lmsp_jupyter.protocol.events import EVENT_NAMES, FINAL_EVENTS
from tests.conftest import MODEL, LiveServer
from tests.helpers import eventually
from tests.spec import SPEC_STATUSES

Case = schemathesis.Case[Any]
Operation = schemathesis.APIOperation[Any, Any, Any, Any]

#: Output tokens a generated request may ask for, so that the real model stays cheap.
MAX_OUTPUT_TOKENS = 4
#: Generated requests per operation and mode that name the bundled model (others get 404),
#: unless the fuzzer is told otherwise.
MODEL_CALLS_PER_OPERATION = 15


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

    def __init__(
        self,
        live_server: LiveServer,
        document: dict[str, Any],
        model_calls: int = MODEL_CALLS_PER_OPERATION,
    ) -> None:
        """``model_calls``: how many cases of each operation and mode may name the model."""
        self.base_url = live_server.lmsp
        self.model_calls_per_operation = model_calls
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
        use_model = dice == 0 and self.model_calls[label] < self.model_calls_per_operation
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

    def operation(
        self, operation: Operation, mode: GenerationMode, examples: int, batch: int | None = None
    ) -> None:
        """Send ``examples`` generated cases of one operation and mode: the same ones on every
        run, each ``batch`` its own."""
        label = f"{operation.label} ({mode.value})"

        @seed(batch or 0)
        @settings(
            max_examples=examples,
            derandomize=batch is None,
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
        self.run.seconds_by_operation[label] = (
            self.run.seconds_by_operation.get(label, 0.0) + time.monotonic() - began
        )
