"""What the sync and async clients share: the requests to build and what their replies mean.

The two client classes only do I/O; deciding what to send and what came back is here, once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from ..protocol.completions import TextCompletion
from ..protocol.embeddings import EmbeddingList
from ..protocol.errors import Problem
from ..protocol.items import McpApprovalRequest
from ..protocol.models import LMSP_VERSION, Model, ModelList, ServiceDocument
from ..protocol.requests import ResponseRequest
from ..protocol.responses import Response
from ..protocol.tasks import Task, TaskList, TaskRequest
from ._errors import ProblemError, ProtocolViolation, ServiceUnreachable
from ._sse import SseParser

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

ACCEPT_EVENTS = {"Accept": "text/event-stream"}

RequestLike = ResponseRequest | Mapping[str, Any]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP exchange: what to send, and how to read a successful reply."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)


def default_headers(token: str | None) -> dict[str, str]:
    """Headers of every request: the protocol version and, if known, the bearer token."""
    headers = {"LMSP-Version": LMSP_VERSION}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def service() -> Call[ServiceDocument]:
    """``GET /lmsp/v1``."""
    return Call("GET", "", _model(ServiceDocument))


def models() -> Call[list[Model]]:
    """``GET /models``."""
    return Call("GET", "models", lambda reply: _model(ModelList)(reply).data)


def embed(model: str, texts: Sequence[str]) -> Call[list[list[float]]]:
    """``POST /embeddings``: a vector per text, in order."""
    return Call("POST", "embeddings", _vectors, body={"model": model, "input": list(texts)})


def _vectors(reply: httpx.Response) -> list[list[float]]:
    vectors = []
    for item in _model(EmbeddingList)(reply).data:
        if isinstance(item.embedding, str):
            raise ProtocolViolation("a vector came as base64, though floats were asked for")
        vectors.append(item.embedding)
    return vectors


def create_response(request: RequestLike, mcp: Sequence[str] = ()) -> Call[Response]:
    """``POST /responses`` answered at once."""
    body = response_body(request, stream=False, mcp=mcp)
    return Call("POST", "responses", _model(Response), body=body)


def get_response(response_id: str) -> Call[Response]:
    """``GET /responses/{id}``: a stored response."""
    return Call("GET", f"responses/{segment(response_id)}", _model(Response))


def create_task(
    request: TaskRequest | RequestLike,
    idempotency_key: str | None = None,
    mcp: Sequence[str] = (),
) -> Call[Task]:
    """``POST /tasks``: run a response request in the background."""
    if isinstance(request, TaskRequest):
        body = request.model_dump(mode="json")
        body["request"] = with_mcp(body["request"], mcp)
    else:
        body = {"type": "response", "request": response_body(request, stream=False, mcp=mcp)}
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
    return Call("POST", "tasks", _model(Task), body=body, headers=headers)


def get_task(task_id: str) -> Call[Task]:
    """``GET /tasks/{id}``."""
    return Call("GET", f"tasks/{segment(task_id)}", _model(Task))


def list_tasks() -> Call[list[Task]]:
    """``GET /tasks``: newest first."""
    return Call("GET", "tasks", lambda reply: _model(TaskList)(reply).data)


def cancel_task(task_id: str) -> Call[Task]:
    """``POST /tasks/{id}/cancel``."""
    return Call("POST", f"tasks/{segment(task_id)}/cancel", _model(Task))


def create_completion(body: dict[str, Any]) -> Call[TextCompletion]:
    """``POST /completions`` answered at once."""
    return Call("POST", "completions", _model(TextCompletion), body={**body, "stream": False})


def stream_completion(body: dict[str, Any]) -> Call[None]:
    """``POST /completions`` streamed: its chunks are read by :func:`completion_chunk`."""
    return Call("POST", "completions", no_body, body={**body, "stream": True})


def completion_body(
    prompt: str, suffix: str | None, model: str, options: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON body of a completion request; ``options`` left ``None`` are not sent."""
    body = {"model": model, "prompt": prompt, "suffix": suffix, **options}
    return {key: value for key, value in body.items() if value is not None}


def completion_model(models: list[Model]) -> str:
    """The model a completion uses when none is named: a loaded one that fills in the middle,
    else the first loaded, else the first listed (as the lab extension's completer picks)."""
    if not models:
        raise ProtocolViolation("the service lists no model to complete with")

    def rank(model: Model) -> tuple[bool, bool]:
        loaded = model.status == "loaded"
        return not (loaded and "fim" in model.capabilities), not loaded

    return min(models, key=rank).id


class CompletionReader:
    """The chunks of a completion stream, read from its bytes as they come."""

    def __init__(self) -> None:
        self._parser = SseParser()
        #: Whether ``[DONE]`` came: nothing follows.
        self.done = False

    def feed(self, data: bytes) -> list[TextCompletion]:
        """The chunks ``data`` completes."""
        chunks: list[TextCompletion] = []
        for message in self._parser.feed(data):
            chunk = completion_chunk(message.data)
            if chunk is None:
                self.done = True
                break
            chunks.append(chunk)
        return chunks


def completion_chunk(data: str) -> TextCompletion | None:
    """One ``data`` frame of a completion stream: a chunk, ``None`` for ``[DONE]``; an error
    frame raises its problem."""
    if data == "[DONE]":
        return None
    try:
        frame = json.loads(data)
        error = frame.get("error") if isinstance(frame, dict) and len(frame) == 1 else None
        if error is None:
            return TextCompletion.model_validate(frame)
        problem = Problem.model_validate(error)
    except ValueError as exc:  # pydantic's ValidationError too
        raise ProtocolViolation(f"not a completion chunk: {exc}") from None
    raise ProblemError(problem)


def response_body(request: RequestLike, *, stream: bool, mcp: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON body of a response request, with ``stream`` set as the endpoint needs and
    an ``mcp`` tool for each label of ``mcp``."""
    if isinstance(request, ResponseRequest):
        body = request.model_copy(update={"stream": stream}).model_dump(mode="json", by_alias=True)
    else:
        body = {**request, "stream": stream}
    return with_mcp(body, mcp)


def with_mcp(body: dict[str, Any], labels: Sequence[str]) -> dict[str, Any]:
    """``body`` offering the tools of the MCP servers ``labels`` name: one ``mcp`` tool each
    (LMSP 1.0 section 11.6), after the tools it has; every call waits for approval."""
    if isinstance(labels, str):
        raise TypeError("mcp takes a list of server labels, not one string")
    if not labels:
        return body
    mcp = [{"type": "mcp", "server_label": label} for label in dict.fromkeys(labels)]
    return {**body, "tools": [*(body.get("tools") or []), *mcp]}


def approval_request(
    response: Response, approve: bool | Mapping[str, bool] = True, *, reason: str | None = None
) -> dict[str, Any]:
    """The request that answers the MCP approval requests ``response`` ended with (11.6).

    ``approve``: one decision for every request, or a decision per approval request id
    (each of them). ``reason`` goes with denials. The request continues ``response``
    (``previous_response_id``) with its model and tools as the response shows them (an MCP
    tool's ``headers`` are not shown: add them again); send it like any other.
    """
    waiting = [item.id for item in response.output if isinstance(item, McpApprovalRequest)]
    if not waiting:
        raise ValueError(f"{response.id} ends with no mcp_approval_request")
    decisions = dict.fromkeys(waiting, approve) if isinstance(approve, bool) else dict(approve)
    if set(decisions) != set(waiting):
        raise ValueError(f"decide each of {', '.join(waiting)}, not {', '.join(decisions)}")
    answers = []
    for request_id in waiting:
        answer: dict[str, Any] = {
            "type": "mcp_approval_response",
            "approval_request_id": request_id,
            "approve": decisions[request_id],
        }
        if not decisions[request_id] and reason is not None:
            answer["reason"] = reason
        answers.append(answer)
    request: dict[str, Any] = {
        "model": response.model,
        "previous_response_id": response.id,
        "input": answers,
        "store": response.store,
    }
    if response.tools:
        request["tools"] = response.tools
    return request


def read_reply(reply: httpx.Response, read: Callable[[httpx.Response], T]) -> T:
    """The value of a reply that was read in full, or the error it carries."""
    if reply.is_error:
        raise problem_error(reply)
    return read(reply)


def problem_error(reply: httpx.Response) -> ProblemError | ProtocolViolation:
    """The exception of an error reply."""
    if media_type(reply) != "application/problem+json":
        return ProtocolViolation(f"HTTP {reply.status_code} without a problem document")
    try:
        return ProblemError(Problem.model_validate_json(reply.content))
    except ValidationError as error:
        return ProtocolViolation(f"HTTP {reply.status_code}: invalid problem: {error}")


def unreachable(url: httpx.URL | str, error: httpx.TransportError) -> ServiceUnreachable:
    """The exception of a transport failure."""
    return ServiceUnreachable(f"{url}: {type(error).__name__}: {error}")


@contextmanager
def reaching(url: httpx.URL | str) -> Iterator[None]:
    """Inside, a transport failure talking to ``url`` is :class:`ServiceUnreachable`."""
    try:
        yield
    except httpx.TransportError as error:
        raise unreachable(url, error) from error


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    def read(reply: httpx.Response) -> M:
        try:
            return model.model_validate_json(reply.content)
        except ValidationError as error:
            raise ProtocolViolation(f"not a valid {model.__name__}: {error}") from None

    return read


def media_type(reply: httpx.Response) -> str:
    """The reply's media type, lower case, without parameters."""
    return str(reply.headers.get("Content-Type", "")).split(";")[0].strip().lower()


def no_body(reply: httpx.Response) -> None:
    """Read nothing: the reply is a stream, read by a follower."""
    return None


def segment(value: str) -> str:
    """``value`` quoted as one path segment."""
    return quote(value, safe="")
