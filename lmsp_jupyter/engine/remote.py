"""Remote engines: OpenAI-compatible servers (vLLM, llama-server, Ollama, ...) behind the engine
interface.

The server renders the prompt (messages and tools go as Chat Completions), decodes and counts
tokens; this module turns its streamed chunks into generation events. One pooled httpx client per
server; a request is retried only while nothing of its answer has arrived.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar, cast

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..protocol.errors import LmspError
from ..protocol.models import ModelCapability
from .catalog import DEFAULT_CONTEXT_LENGTH, ModelEntry
from .generation import (
    CancelToken,
    ChatMessage,
    EngineError,
    EngineUnavailable,
    GenerationDone,
    GenerationEvent,
    Prompt,
    ReasoningDelta,
    SamplingParams,
    StopReason,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: What a remote model can do unless the configuration says otherwise.
DEFAULT_CAPABILITIES: tuple[ModelCapability, ...] = ("streaming", "tools", "structured_output")
#: How often a generation waiting for the server looks at its cancel token.
CANCEL_POLL_SECONDS = 0.05
#: Seconds before the n-th retry of a request nothing has come back for yet.
RETRY_DELAYS = (0.25, 1.0, 2.0)
#: Statuses a server (or the proxy in front of it) gives while it cannot answer for now.
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})

#: Prompt tokens a chat template may add around each message (role markers), and once (a
#: default system text), beyond the text it is given: the margin of a prompt's upper bound.
TEMPLATE_TOKENS_PER_MESSAGE = 16
TEMPLATE_TOKENS = 256

StructuredOutput = Literal["auto", "json_schema", "json_object"]
#: How a server counts a prompt's tokens: llama-server renders it (``/apply-template``) and
#: tokenizes the text; vLLM tokenizes messages (``/tokenize``); llama-cpp-python's server
#: tokenizes text only (``/extras/tokenize/count``), so its count is an estimate.
_Counting = Literal["llama-server", "vllm", "extras", "none"]


class RemoteServer(BaseModel):
    """One entry of ``LmspApp.remote_servers``: an OpenAI-compatible server and its models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Prefix of its models' ids (``<name>/<model>``) and their ``owned_by``.
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    #: The API root, ending where OpenAI's ``/models`` and ``/chat/completions`` start.
    url: str = Field(pattern=r"^https?://")
    api_key: str | None = None
    #: The environment variable holding the API key (kept out of configuration files).
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    #: Longest wait for the server to say anything (the first token included).
    timeout_seconds: float = Field(default=600.0, gt=0)
    #: The models offered: remote ids, or ``{remote id: name here}``; ``None``: every one listed.
    models: list[str] | dict[str, str] | None = None
    #: What its models can do (``reasoning`` if they think aloud); ``None``: the defaults.
    capabilities: list[ModelCapability] | None = None
    #: The context window in tokens, when the server does not report one.
    context_length: int | None = Field(default=None, gt=0)
    #: How the server takes a JSON Schema: OpenAI's ``json_schema`` form, or
    #: ``{"type": "json_object", "schema": ...}`` (llama-cpp-python's server); ``auto`` tries
    #: the first and falls back to the second when the server refuses it.
    structured_output: StructuredOutput = "auto"
    #: Retries of a request the server has not started answering (refused, 502–504).
    retries: int = Field(default=2, ge=0, le=len(RETRY_DELAYS))
    #: Requests sent to the server at once, per model; more wait in this service's line.
    parallel: int = Field(default=8, gt=0)

    @classmethod
    def parse(cls, config: dict[str, Any]) -> RemoteServer:
        """A configured server; a bad entry raises ``ValueError`` naming the problem."""
        try:
            return cls.model_validate(config)
        except ValidationError as exc:
            name = config.get("name", "?")
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors()
            )
            raise ValueError(f"remote server {name!r}: {problems}") from None

    def api_token(self) -> str | None:
        """The API key sent as ``Authorization: Bearer``: configured, or from the environment."""
        if self.api_key:
            return self.api_key
        return os.environ.get(self.api_key_env) if self.api_key_env else None


@dataclass(frozen=True)
class _RemoteModel:
    remote_id: str
    context_length: int


class RemoteEngine:
    """The models of one OpenAI-compatible server, generated through its Chat Completions API.

    Implements the engine interface for the entries it lists (ids ``<server name>/<model>``).
    Whether the server answers is learnt from every exchange: a failed one marks it down (its
    models are then listed ``unavailable``), and while it is down each new request asks it
    again before being refused with ``engine_unavailable``.
    """

    def __init__(
        self, server: RemoteServer, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.server = server
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._models: dict[str, _RemoteModel] = {}
        self._listed = False
        self._reachable: bool | None = None
        self._format: StructuredOutput = server.structured_output
        self._counting: _Counting | None = None  # found out at the first count
        self._refreshing: asyncio.Future[None] | None = None

    # --- the server's models ----------------------------------------------------------------

    @property
    def reachable(self) -> bool:
        """Whether the server answered the last time it was asked."""
        return self._reachable is True

    def list(self) -> list[ModelEntry]:
        """Its models as last listed (or as configured, before it has answered)."""
        models = self._models
        if not self._listed:
            models = {
                model_id: _RemoteModel(remote, self._context_length(None))
                for remote, model_id in self._configured().items()
            }
        return [self._entry(model_id, model) for model_id, model in models.items()]

    def get(self, model_id: str) -> ModelEntry:
        """The entry of ``model_id``. While the server is down or not yet asked, a model it
        might have gets an entry (marked unavailable), so the request fails as unavailable."""
        model = self._models.get(model_id)
        if model is not None:
            return self._entry(model_id, model)
        if self.reachable:
            raise LmspError(
                "model_not_found", f"model {model_id!r} is not available", param="model"
            )
        remote = model_id.removeprefix(f"{self.server.name}/")
        return self._entry(model_id, _RemoteModel(remote, self._context_length(None)))

    def _entry(self, model_id: str, model: _RemoteModel) -> ModelEntry:
        return ModelEntry(
            id=model_id,
            source="remote",
            size_bytes=0,
            context_length=model.context_length,
            architecture="remote",
            chat_template=None,
            owned_by=self.server.name,
            capabilities=tuple(self.server.capabilities or DEFAULT_CAPABILITIES),
            available=self.reachable,
        )

    def _configured(self) -> dict[str, str]:
        """Remote id → id here, of the configured models."""
        models = self.server.models or []
        renames = models if isinstance(models, dict) else {remote: remote for remote in models}
        return {remote: f"{self.server.name}/{name}" for remote, name in renames.items()}

    def _context_length(self, reported: dict[str, Any] | None) -> int:
        if self.server.context_length is not None:
            return self.server.context_length
        for value in _reported_context_lengths(reported or {}):
            if isinstance(value, int) and value > 0:
                return value
        return DEFAULT_CONTEXT_LENGTH

    async def refresh(self) -> None:
        """Ask the server for its models (one request at a time, shared by every caller)."""
        if self._refreshing is None:
            self._refreshing = asyncio.ensure_future(self._list_models())
        try:
            await asyncio.shield(self._refreshing)
        finally:
            if self._refreshing.done():
                self._refreshing = None

    async def _list_models(self) -> None:
        try:
            response = await self._http().get("models")
            response.raise_for_status()
            listed = response.json()["data"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self._mark(False, f"listing its models failed: {_describe(exc)}")
            return
        configured = self._configured() if self.server.models is not None else None
        models: dict[str, _RemoteModel] = {}
        for data in listed:
            remote = data.get("id") if isinstance(data, dict) else None
            if not isinstance(remote, str):
                continue
            if configured is not None and remote not in configured:
                continue
            model_id = configured[remote] if configured else f"{self.server.name}/{remote}"
            models[model_id] = _RemoteModel(remote, self._context_length(data))
        self._models, self._listed = models, True
        self._mark(True)

    def _mark(self, reachable: bool, why: str = "") -> None:
        if reachable != self._reachable:
            if reachable:
                log.info("remote server %r answers", self.server.name)
            else:
                log.warning("remote server %r does not answer: %s", self.server.name, why)
        self._reachable = reachable

    # --- the engine interface -----------------------------------------------------------------

    def context_length(self, entry: ModelEntry) -> int:
        """The window the server reported (or was configured) for ``entry``."""
        model = self._models.get(entry.id)
        return model.context_length if model is not None else entry.context_length

    def parallel(self, entry: ModelEntry) -> int:
        """Requests sent at once for ``entry`` (the server batches them itself)."""
        return self.server.parallel

    def thinks(self, entry: ModelEntry) -> bool:
        """Whether the configuration says its models reason between ``<think>`` tags."""
        return "reasoning" in (self.server.capabilities or ())

    def is_loaded(self, model_id: str) -> bool:
        """Never: the server owns its memory; its models are ``available`` while it answers."""
        return False

    def footprint(self, entry: ModelEntry) -> int:
        """None of this process's memory: the server holds the model."""
        return 0

    async def load(self, entry: ModelEntry) -> None:
        """Nothing to load here: the server loads its models itself."""

    async def unload(self, model_id: str) -> None:
        """Nothing to free here."""

    async def render(
        self,
        entry: ModelEntry,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        schema: dict[str, Any] | None = None,
    ) -> Prompt:
        """The messages and tools to send; the server renders them with its own template.

        A server that is down (or never asked) is asked first: if it still does not answer,
        ``EngineUnavailable``; if it answers without the model, ``model_not_found``.
        """
        if not self.reachable:
            await self.refresh()
            if not self.reachable:
                raise EngineUnavailable(f"remote server {self.server.name!r} does not answer")
            self.get(entry.id)
        messages, tools = tuple(messages), tuple(tools)

        async def counter() -> tuple[int, bool]:
            return await self._count(self._remote_id(entry), messages, tools)

        return Prompt(
            text="",
            tokens=[],
            messages=messages,
            tools=tools,
            bound=_bound(messages, tools),
            counter=counter,
        )

    async def _count(
        self, remote_id: str, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> tuple[int, bool]:
        """The prompt's tokens as the server counts them, and whether the count is exact.

        Each way is tried in turn the first time; the one that works is kept. A server with
        none gets the upper bound (every token stands for at least one byte of text).
        """
        wire = {"messages": [_wire_message(message) for message in messages]}
        if tools:
            wire["tools"] = [tool.as_template_dict() for tool in tools]
        ways: tuple[_Counting, ...] = (
            (self._counting,) if self._counting else ("llama-server", "vllm", "extras")
        )
        for way in ways:
            try:
                counted = await self._count_by(way, remote_id, wire)
            except httpx.TransportError as exc:
                self._mark(False, _describe(exc))
                raise EngineUnavailable(
                    f"remote server {self.server.name!r} does not answer: {_describe(exc)}"
                ) from None
            if counted is not None:
                self._counting = way
                return counted
        self._counting = "none"
        return _bound(messages, tools), False

    async def _count_by(
        self, way: _Counting, remote_id: str, wire: dict[str, Any]
    ) -> tuple[int, bool] | None:
        """The count one way, or ``None`` if the server does not count that way."""
        http, root = self._http(), self._root()
        if way == "llama-server":
            rendered = await http.post(f"{root}apply-template", json=wire)
            prompt = _json_field(rendered, "prompt", str)
            if prompt is None:
                return None
            body = {"content": prompt, "add_special": True, "parse_special": True}
            tokens = _json_field(await http.post(f"{root}tokenize", json=body), "tokens", list)
            return None if tokens is None else (len(tokens), True)
        if way == "vllm":
            body = {"model": remote_id, "add_generation_prompt": True, **wire}
            count = _json_field(await http.post(f"{root}tokenize", json=body), "count", int)
            return None if count is None else (count, True)
        if way == "extras":
            body = {"model": remote_id, "input": _plain_text(wire)}
            response = await http.post(f"{root}extras/tokenize/count", json=body)
            count = _json_field(response, "count", int)
            if count is None:
                return None
            margin = TEMPLATE_TOKENS_PER_MESSAGE * len(wire["messages"]) + TEMPLATE_TOKENS
            return count + margin, False
        return None

    def _root(self) -> str:
        """The server's own root (its API root without ``/v1``), where counting endpoints are."""
        url = self.server.url.rstrip("/")
        return url.removesuffix("/v1") + "/" if url.endswith("/v1") else url + "/"

    def _remote_id(self, entry: ModelEntry) -> str:
        model = self._models.get(entry.id)
        return model.remote_id if model else entry.id.removeprefix(f"{self.server.name}/")

    async def generate(
        self, entry: ModelEntry, prompt: Prompt, params: SamplingParams, cancel: CancelToken
    ) -> AsyncIterator[GenerationEvent]:
        """Stream one Chat Completion; the last event is a ``GenerationDone``.

        Closing the iterator, or ``cancel``, closes the upstream request: vLLM, llama-server
        and llama-cpp-python's server stop generating when their client goes away.
        """
        remote_id = self._remote_id(entry)
        attempt = 0
        while True:
            body = self._body(remote_id, entry, prompt, params)
            try:
                async with self._http().stream("POST", "chat/completions", json=body) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        if self._refused_schema_form(response, params):
                            continue
                        if response.status_code in _UNAVAILABLE_STATUSES:
                            raise _Retryable(f"it answered {response.status_code}")
                        raise EngineError(
                            f"remote server {self.server.name!r} refused the request "
                            f"({response.status_code}): {_error_text(response)}"
                        )
                    self._mark(True)
                    chunks = _Chunks(response, cancel, body)
                    async for event in chunks.events():
                        if isinstance(event, GenerationDone) and chunks.unreported(event):
                            event = replace(
                                event, prompt_tokens=await self._prompt_tokens(body, prompt)
                            )
                        yield event
                    return
            except _Lost as exc:
                self._mark(False, str(exc))
                raise EngineError(
                    f"remote server {self.server.name!r} was lost mid-answer: {exc}"
                ) from None
            except (_Retryable, httpx.TransportError) as exc:
                if isinstance(exc, httpx.ReadTimeout) or attempt >= self.server.retries:
                    why = _describe(exc)
                    self._mark(False, why)
                    raise EngineUnavailable(
                        f"remote server {self.server.name!r} does not answer: {why}"
                    ) from None
                await asyncio.sleep(RETRY_DELAYS[attempt])
                attempt += 1

    async def _prompt_tokens(self, body: dict[str, Any], prompt: Prompt) -> int:
        """The prompt tokens of a streamed request whose server reported no usage
        (llama-cpp-python's server streams none): the ``usage`` of the same request, not
        streamed and cut at one token, where the server counts the prompt it rendered; if
        that fails, the server's count of the prompt (or the upper bound), never 0."""
        once = {key: value for key, value in body.items() if key != "stream_options"}
        once.update(stream=False, max_tokens=1)
        try:
            response = await self._http().post("chat/completions", json=once)
            response.raise_for_status()
            return int(response.json()["usage"]["prompt_tokens"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.warning(
                "remote server %r reported no usage, nor did it count the prompt (%s)",
                self.server.name,
                _describe(exc),
            )
        tokens, _ = await self._count(body["model"], prompt.messages, prompt.tools)
        return tokens

    def _body(
        self, remote_id: str, entry: ModelEntry, prompt: Prompt, params: SamplingParams
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": remote_id,
            "messages": [_wire_message(message) for message in prompt.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if params.max_tokens < self.context_length(entry):  # else: up to the server's window
            body["max_tokens"] = params.max_tokens
        sampling = {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "min_p": params.min_p,
            "seed": params.seed,
        }
        body.update({key: value for key, value in sampling.items() if value is not None})
        if params.stop:
            body["stop"] = list(params.stop)
        if prompt.tools:
            body["tools"] = [tool.as_template_dict() for tool in prompt.tools]
        if len(params.forced_tools) == 1:
            body["tool_choice"] = {"type": "function", "function": {"name": params.forced_tools[0]}}
        elif params.forced_tools:
            body["tool_choice"] = "required"
        if params.schema is not None and not params.forced_tools:
            body["response_format"] = self._response_format(params.schema)
        return body

    def _response_format(self, schema: dict[str, Any]) -> dict[str, Any]:
        if self._format == "json_object":
            return {"type": "json_object", "schema": schema}
        return {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema, "strict": True},
        }

    def _refused_schema_form(self, response: httpx.Response, params: SamplingParams) -> bool:
        """Whether the server refused OpenAI's ``json_schema`` form that ``auto`` tried first
        (an error naming ``response_format``: llama-cpp-python's server answers 500); if so,
        it gets the other form from now on."""
        if params.schema is None or params.forced_tools or self._format != "auto":
            return False
        if response.status_code in _UNAVAILABLE_STATUSES or "response_format" not in response.text:
            return False
        log.info("remote server %r takes schemas as json_object", self.server.name)
        self._format = "json_object"
        return True

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = dict(self.server.headers)
            token = self.server.api_token()
            if token:
                headers["Authorization"] = f"Bearer {token}"
            timeout = httpx.Timeout(
                self.server.timeout_seconds, connect=min(10.0, self.server.timeout_seconds)
            )
            self._client = httpx.AsyncClient(
                base_url=self.server.url.rstrip("/") + "/",
                headers=headers,
                timeout=timeout,
                transport=self._transport,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the pooled connections."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def close(self) -> None:
        """Close the pooled connections (soon, on the running loop, if there is one)."""
        if self._client is None:
            return
        try:
            asyncio.get_running_loop().create_task(self.aclose())
        except RuntimeError:
            self._client = None


class _Retryable(Exception):
    """The server said it cannot answer now; nothing of the answer has come."""


class _Lost(Exception):
    """The connection broke after part of the answer came."""


class _Chunks:
    """The generation events of one streamed Chat Completion."""

    def __init__(self, response: httpx.Response, cancel: CancelToken, body: dict[str, Any]):
        self.response = response
        self.cancel = cancel
        self.limited = "max_tokens" in body
        self.usage: dict[str, Any] = {}
        self.finish: str | None = None
        self.deltas = 0
        self.started = False

    async def events(self) -> AsyncIterator[GenerationEvent]:
        lines = cast(AsyncGenerator[str, None], self.response.aiter_lines())
        ended = False  # the server said [DONE]
        try:
            while True:
                line = await self._next(lines)
                if line is None:
                    yield self._done("cancelled")
                    return
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    ended = True
                    break
                for event in self._chunk(data):
                    self.started = True
                    yield event
        except StopAsyncIteration:
            pass
        except httpx.TransportError as exc:
            if not self.started:
                raise
            raise _Lost(_describe(exc)) from None
        finally:
            await lines.aclose()
        if self.finish is None:
            if ended:  # llama-cpp-python's server, for one, cuts answers short this way
                raise EngineError("the server ended the answer without saying why")
            if not self.started:
                raise _Retryable("it closed the stream before answering")
            raise _Lost("the stream ended before the answer did")
        reason: StopReason = "stop"
        if self.finish == "length":
            reason = "max_tokens" if self.limited else "context_length"
        yield self._done(reason)

    async def _next(self, lines: AsyncIterator[str]) -> str | None:
        """The next line, or ``None`` once ``cancel`` is set (the read is then abandoned)."""
        if self.cancel.cancelled:
            return None
        reading = asyncio.ensure_future(anext(lines))
        while True:
            done, _ = await asyncio.wait({reading}, timeout=CANCEL_POLL_SECONDS)
            if done:
                return reading.result()
            if self.cancel.cancelled:
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
                return None

    def _chunk(self, data: str) -> list[GenerationEvent]:
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise EngineError(f"the server sent a chunk that is not JSON: {data[:200]!r}") from None
        if not isinstance(chunk, dict):
            return []
        if "error" in chunk:
            raise EngineError(f"the server failed: {_message(chunk['error'])}")
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        events: list[GenerationEvent] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            # llama-server and vLLM's reasoning parsers; newer vLLM names it "reasoning"
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self.deltas += 1
                events.append(ReasoningDelta(reasoning))
            if delta.get("content"):
                self.deltas += 1
                events.append(TextDelta(delta["content"]))
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                events.append(
                    ToolCallDelta(
                        index=int(call.get("index", 0)),
                        name=function.get("name"),
                        arguments=function.get("arguments") or "",
                    )
                )
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return events

    def unreported(self, done: GenerationDone) -> bool:
        """Whether ``done`` ended an answer whose prompt the server did not count."""
        return done.reason != "cancelled" and not isinstance(self.usage.get("prompt_tokens"), int)

    def _done(self, reason: StopReason) -> GenerationDone:
        details = self.usage.get("prompt_tokens_details") or {}
        return GenerationDone(
            reason=reason,
            prompt_tokens=int(self.usage.get("prompt_tokens") or 0),
            output_tokens=int(self.usage.get("completion_tokens") or self.deltas),
            cached_tokens=int(details.get("cached_tokens") or 0),
        )


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    """A chat turn as Chat Completions takes it: call arguments are JSON text there."""
    wire = message.as_template_dict()
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                **call,
                "function": {
                    **call["function"],
                    "arguments": _json_text(call["function"].get("arguments")),
                },
            }
            for call in message.tool_calls
        ]
    return wire


def _bound(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> int:
    """At least as many tokens as any template makes of ``messages`` and ``tools``: a token
    stands for at least one byte of text, plus the markers a template adds."""
    text = sum(len(json.dumps(_wire_message(m), ensure_ascii=False).encode()) for m in messages)
    text += sum(len(json.dumps(tool.as_template_dict()).encode()) for tool in tools)
    return text + TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + TEMPLATE_TOKENS


def _plain_text(wire: dict[str, Any]) -> str:
    """Messages and tools as plain text, each message a role line and its content."""
    lines = [f"{m['role']}\n{m.get('content') or ''}" for m in wire["messages"]]
    lines += [json.dumps(m["tool_calls"]) for m in wire["messages"] if m.get("tool_calls")]
    lines += [json.dumps(tool) for tool in wire.get("tools", [])]
    return "\n".join(lines)


def _json_field(response: httpx.Response, name: str, kind: type[T]) -> T | None:
    """``response``'s JSON field ``name`` if it answered 200 with one of that ``kind``."""
    if response.status_code != 200:
        return None
    try:
        value = response.json().get(name)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _reported_context_lengths(data: dict[str, Any]) -> list[Any]:
    """Where servers put a model's window: vLLM ``max_model_len``, llama-server ``meta``."""
    meta = data.get("meta")
    if not isinstance(meta, dict):
        meta = {}
    return [data.get("max_model_len"), data.get("context_length"), meta.get("n_ctx")]


def _message(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)[:500]
    return str(error)[:500]


def _error_text(response: httpx.Response) -> str:
    try:
        return _message(response.json().get("error") or response.json().get("detail"))
    except (ValueError, AttributeError):
        return response.text[:500]


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
