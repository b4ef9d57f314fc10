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


def create_response(request: RequestLike) -> Call[Response]:
    """``POST /responses`` answered at once."""
    return Call("POST", "responses", _model(Response), body=response_body(request, stream=False))


def get_response(response_id: str) -> Call[Response]:
    """``GET /responses/{id}``: a stored response."""
    return Call("GET", f"responses/{segment(response_id)}", _model(Response))


def create_task(
    request: TaskRequest | RequestLike, idempotency_key: str | None = None
) -> Call[Task]:
    """``POST /tasks``: run a response request in the background."""
    if isinstance(request, TaskRequest):
        body = request.model_dump(mode="json")
    else:
        body = {"type": "response", "request": response_body(request, stream=False)}
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


def response_body(request: RequestLike, *, stream: bool) -> dict[str, Any]:
    """The JSON body of a response request, with ``stream`` set as the endpoint needs."""
    if isinstance(request, ResponseRequest):
        return request.model_copy(update={"stream": stream}).model_dump(mode="json", by_alias=True)
    return {**request, "stream": stream}


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
