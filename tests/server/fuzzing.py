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
from http.cookiejar import DefaultCookiePolicy
from typing import Any

import httpx
import requests
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
from lmsp_jupyter.protocol.items import MAX_ITEMS
from tests.conftest import MODEL
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

    def add(self, other: FuzzRun) -> None:
        """Count ``other``'s requests and failures in this run's (its time is not added)."""
        self.requests += other.requests
        self.by_status += other.by_status
        self.by_operation += other.by_operation
        for label, statuses in other.statuses_by_operation.items():
            self.statuses_by_operation[label] += statuses
        for label, seconds in other.seconds_by_operation.items():
            self.seconds_by_operation[label] = self.seconds_by_operation.get(label, 0.0) + seconds
        self.model_calls += other.model_calls
        for check, failures in other.failures.items():
            self.failures[check] += failures

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


#: Request fields that ask for structured output or tools (what constrained decoding enforces).
CONSTRAINING = ("response_format", "text", "tools", "tool_choice")


def _constrained(case: Case) -> bool:
    body = case.body
    if case.operation.path == "/tasks" and isinstance(body, dict):
        body = body.get("request")
    return isinstance(body, dict) and any(name in body for name in CONSTRAINING)


def _stored(body: Any) -> bool:
    return isinstance(body, dict) and body.get("store") is True


class Fuzzer:
    """Sends generated cases to the live server and runs every check on each reply."""

    def __init__(
        self,
        base_url: str,
        token: str,
        model_calls: int = MODEL_CALLS_PER_OPERATION,
        *,
        decodes_constraints: bool = True,
    ) -> None:
        """``base_url``: the server's LMSP root, reached with ``token``; ``model_calls``: how
        many cases of each operation and mode may name the model. ``decodes_constraints``
        false: the server's model ignores schemas and forced tool calls (the scripted engine,
        whose answer then fails as a breach of its contract, ``500 generation_failed``), so a
        case that asks for structured output or tools never names it."""
        self.base_url = base_url
        self.model_calls_per_operation = model_calls
        self.decodes_constraints = decodes_constraints
        self.auth = {"Authorization": f"Bearer {token}"}
        self.own_checks: dict[str, Callable[[schemathesis.Response, Any], None]] = {
            "problem_document": problem_document,
            "sse_stream": sse_stream,
        }
        self.run = FuzzRun()
        #: One connection pool for every case (a new connection per request costs more than
        #: most of the server's answers), keeping no cookie: a cookie Jupyter set would
        #: authenticate the cases sent without credentials.
        self.session = requests.Session()
        self.session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        self.model_calls: Counter[str] = Counter()
        #: IDs the server handed out, put into some later cases so that they reach real objects.
        self.known: dict[str, list[str]] = {"model_id": [MODEL], "task_id": [], "response_id": []}

    def close(self) -> None:
        """Close the connections."""
        self.session.close()

    def prepare(self, case: Case, dice: int, label: str) -> None:
        """Keep model calls cheap; sometimes use the bundled model or a known ID."""
        use_model = dice == 0 and self.model_calls[label] < self.model_calls_per_operation
        if not self.decodes_constraints and _constrained(case):
            use_model = False
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
        response = case.call(
            base_url=self.base_url, session=self.session, headers=self.auth, timeout=120
        )
        run = self.run
        run.requests += 1
        run.by_status[response.status_code] += 1
        run.by_operation[label] += 1
        run.statuses_by_operation[label][response.status_code] += 1
        self.remember(case, response)
        try:  # all checks at once; when one fails, each again to name the ones that did
            case.validate_response(response, checks=list(CHECKS.values()), headers=self.auth)
        except (Exception, BaseExceptionGroup):  # schemathesis' FailureGroup
            for name, check in CHECKS.items():
                try:
                    case.validate_response(response, checks=[check], headers=self.auth)
                except (Exception, BaseExceptionGroup) as failure:
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


# --- Anthropic's Messages API, by hand ---------------------------------------------------------

#: A valid Anthropic request the fuzz spoils: one token, so an answer costs the model little.
ANTHROPIC_VALID: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 1,
    "messages": [{"role": "user", "content": "Hi"}],
}
ANTHROPIC_FIELDS = [
    "model",
    "max_tokens",
    "messages",
    "system",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "metadata",
    "service_tier",
]
#: Values of the wrong type or out of range for every field (no positive integer under a
#: billion: a valid ``max_tokens`` could then ask the model for long answers).
BAD: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(max_value=0),
    st.integers(min_value=10**9, max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.just("x" * 300_000),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=3),
)
BLOCK_TYPES = [
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "video",
    "",
]
BLOCK_FIELDS = [
    "type",
    "text",
    "id",
    "name",
    "input",
    "tool_use_id",
    "content",
    "is_error",
    "source",
]
anthropic_block: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {"type": st.sampled_from(BLOCK_TYPES)},
    optional={name: st.one_of(BAD, st.just({})) for name in BLOCK_FIELDS[1:]},
)
anthropic_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system", "tool", "", 3]),
        "content": st.one_of(BAD, st.lists(anthropic_block, max_size=3)),
    }
)


@st.composite
def spoiled_anthropic(draw: st.DrawFn) -> dict[str, Any]:
    """A valid Messages API body with one thing wrong (or, sometimes, still right)."""
    body: dict[str, Any] = json.loads(json.dumps(ANTHROPIC_VALID))
    how = draw(st.sampled_from(["field", "missing", "messages", "blocks", "tools", "huge"]))
    if how == "field":
        body[draw(st.sampled_from(ANTHROPIC_FIELDS))] = draw(BAD)
    elif how == "missing":
        del body[draw(st.sampled_from(["model", "max_tokens", "messages"]))]
    elif how == "messages":
        body["messages"] = draw(st.lists(anthropic_message, max_size=3))
    elif how == "blocks":
        body["messages"][0]["content"] = draw(st.lists(anthropic_block, min_size=1, max_size=4))
    elif how == "tools":
        body["tools"] = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.one_of(st.just("get_weather"), BAD)},
                    optional={"input_schema": st.one_of(BAD, st.just({"maxLength": 10**6}))},
                ),
                max_size=2,
            )
        )
        body["tool_choice"] = draw(
            st.one_of(BAD, st.sampled_from([{"type": "any"}, {"type": "tool", "name": "nope"}]))
        )
    else:
        body["messages"] = [{"role": "user", "content": "x"}] * (MAX_ITEMS + 1)
    return body


#: The paths of Anthropic's API the spoiled bodies go to.
ANTHROPIC_PATHS = st.sampled_from(["/messages", "/messages/count_tokens"])


def anthropic_shape(response: httpx.Response) -> str | None:
    """What is wrong with a reply of Anthropic's API (``None``: nothing): an answer, or a 4xx
    in Anthropic's error shape without a traceback."""
    if response.status_code == 200:
        return None
    try:
        error = response.json()
        if (
            400 <= response.status_code < 500
            and set(error) == {"type", "error"}
            and error["type"] == "error"
            and isinstance(error["error"]["message"], str)
            and "Traceback" not in response.text
        ):
            return None
    except (ValueError, TypeError, KeyError):
        pass
    return f"→ {response.status_code} {response.text[:300]}"
