"""Remote engines: OpenAI-compatible servers (vLLM, llama-server, Ollama, ...) behind the engine
interface.

The server renders the prompt (messages and tools go as Chat Completions), decodes and counts
tokens (:mod:`.remote_tokens`); :mod:`.remote_stream` turns its streamed chunks into generation
events. One pooled httpx client per server; a request is retried only while nothing of its
answer has arrived. The configuration of a server is :class:`.remote_server.RemoteServer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from ...protocol.errors import LmspError
from ...protocol.models import ModelCapability
from ..backend import Messages, ModelsHeldElsewhere, OutputSchema, Tools
from ..catalog import DEFAULT_CONTEXT_LENGTH, ModelEntry
from ..generation import (
    CancelToken,
    ChatMessage,
    EngineError,
    EngineUnavailable,
    GenerationDone,
    GenerationEvent,
    Prompt,
    SamplingParams,
    ToolSpec,
)
from .server import RETRY_DELAYS, RemoteServer, StructuredOutput
from .stream import ChunkStream, Lost, Retryable, describe, error_text
from .tokens import PromptCounter, bound, wire_message

__all__ = ["RemoteEngine", "RemoteServer"]

log = logging.getLogger(__name__)

#: What a remote model can do unless the configuration says otherwise.
DEFAULT_CAPABILITIES: tuple[ModelCapability, ...] = ("streaming", "tools", "structured_output")
#: Statuses a server (or the proxy in front of it) gives while it cannot answer for now.
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})


@dataclass(frozen=True)
class _RemoteModel:
    remote_id: str
    context_length: int


class RemoteEngine(ModelsHeldElsewhere):
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
        self._counter = PromptCounter(_root(server.url))
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
        refreshing = self._refreshing
        if refreshing is None:
            refreshing = self._refreshing = asyncio.ensure_future(self._list_models())
            # Cleared when it ends, not by a caller: a caller that was cancelled, or the first
            # of many to resume, must leave the others' request alone.
            refreshing.add_done_callback(self._refreshed)
        await asyncio.shield(refreshing)

    def _refreshed(self, refreshing: asyncio.Future[None]) -> None:
        if self._refreshing is refreshing:
            self._refreshing = None

    async def first_listing(self, within: float) -> None:
        """Wait, at most ``within`` seconds, for the server's first answer about its models
        (asking it, unless that is under way). A server that answered, or failed to, once is
        not waited for: its models are listed as it last answered."""
        if self._reachable is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.refresh(), within)

    async def _list_models(self) -> None:
        try:
            response = await self._http().get("models")
            response.raise_for_status()
            listed = response.json()["data"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self._mark(False, f"listing its models failed: {describe(exc)}")
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

    async def render(
        self, entry: ModelEntry, messages: Messages, tools: Tools = (), schema: OutputSchema = None
    ) -> Prompt:
        """The messages and tools to send; the server renders them with its own template.

        A server that is down (or never asked) is asked first: if it still does not answer,
        ``EngineUnavailable``; if it answers without the model, ``model_not_found``.
        """
        await self._answering(entry)
        messages, tools = tuple(messages), tuple(tools)

        async def counter() -> tuple[int, bool]:
            return await self._count(self._remote_id(entry), messages, tools)

        return Prompt(
            text="",
            tokens=[],
            messages=messages,
            tools=tools,
            bound=bound(messages, tools),
            counter=counter,
        )

    async def render_text(self, entry: ModelEntry, text: str, suffix: str | None = None) -> Prompt:
        """The text (and suffix) to send to the server's Completions, which fills in the
        middle itself where its model can; its tokens are bounded by its bytes."""
        await self._answering(entry)
        size = len(text.encode()) + len((suffix or "").encode())
        return Prompt(text=text, tokens=[], raw=True, suffix=suffix, bound=size + 1)

    async def _answering(self, entry: ModelEntry) -> None:
        """Ask a server that is down (or never asked) again, before a prompt is made for it."""
        if not self.reachable:
            await self.refresh()
            if not self.reachable:
                raise EngineUnavailable(f"remote server {self.server.name!r} does not answer")
            self.get(entry.id)

    async def _count(
        self, remote_id: str, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> tuple[int, bool]:
        """The prompt's tokens as the server counts them, and whether the count is exact."""
        try:
            return await self._counter.count(self._http(), remote_id, messages, tools)
        except httpx.TransportError as exc:
            self._mark(False, describe(exc))
            raise EngineUnavailable(
                f"remote server {self.server.name!r} does not answer: {describe(exc)}"
            ) from None

    def _remote_id(self, entry: ModelEntry) -> str:
        model = self._models.get(entry.id)
        return model.remote_id if model else entry.id.removeprefix(f"{self.server.name}/")

    async def generate(
        self, entry: ModelEntry, prompt: Prompt, params: SamplingParams, cancel: CancelToken
    ) -> AsyncIterator[GenerationEvent]:
        """Stream one Chat Completion (a Completion for a raw prompt); the last event is a
        ``GenerationDone``.

        Closing the iterator, or ``cancel``, closes the upstream request: vLLM, llama-server
        and llama-cpp-python's server stop generating when their client goes away.
        """
        remote_id = self._remote_id(entry)
        attempt = 0
        while True:
            body = self._body(remote_id, entry, prompt, params)
            path = "completions" if prompt.raw else "chat/completions"
            try:
                async with self._http().stream("POST", path, json=body) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        if self._refused_schema_form(response, params):
                            continue
                        if response.status_code in _UNAVAILABLE_STATUSES:
                            raise Retryable(f"it answered {response.status_code}")
                        raise EngineError(
                            f"remote server {self.server.name!r} refused the request "
                            f"({response.status_code}): {error_text(response)}"
                        )
                    self._mark(True)
                    chunks = ChunkStream(response, cancel, body)
                    async for event in chunks.events():
                        if isinstance(event, GenerationDone) and chunks.unreported(event):
                            event = replace(
                                event, prompt_tokens=await self._prompt_tokens(path, body, prompt)
                            )
                        yield event
                    return
            except Lost as exc:
                self._mark(False, str(exc))
                raise EngineError(
                    f"remote server {self.server.name!r} was lost mid-answer: {exc}"
                ) from None
            except (Retryable, httpx.TransportError) as exc:
                if isinstance(exc, httpx.ReadTimeout) or attempt >= self.server.retries:
                    why = describe(exc)
                    self._mark(False, why)
                    raise EngineUnavailable(
                        f"remote server {self.server.name!r} does not answer: {why}"
                    ) from None
                await asyncio.sleep(RETRY_DELAYS[attempt])
                attempt += 1

    async def _prompt_tokens(self, path: str, body: dict[str, Any], prompt: Prompt) -> int:
        """The prompt tokens of a streamed request whose server reported no usage
        (llama-cpp-python's server streams none): the ``usage`` of the same request, not
        streamed and cut at one token, where the server counts the prompt it rendered; if
        that fails, the server's count of the prompt (or the upper bound), never 0."""
        once = {key: value for key, value in body.items() if key != "stream_options"}
        once.update(stream=False, max_tokens=1)
        try:
            response = await self._http().post(path, json=once)
            response.raise_for_status()
            return int(response.json()["usage"]["prompt_tokens"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.warning(
                "remote server %r reported no usage, nor did it count the prompt (%s)",
                self.server.name,
                describe(exc),
            )
        if prompt.raw:
            return prompt.length
        tokens, _ = await self._count(body["model"], prompt.messages, prompt.tools)
        return tokens

    def _body(
        self, remote_id: str, entry: ModelEntry, prompt: Prompt, params: SamplingParams
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": remote_id}
        if prompt.raw:
            body["prompt"] = prompt.text
            if prompt.suffix is not None:
                body["suffix"] = prompt.suffix
        else:
            body["messages"] = [wire_message(message) for message in prompt.messages]
        body.update(stream=True, stream_options={"include_usage": True})
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
        body.update(_penalties_and_logprobs(params))
        if params.stop:
            body["stop"] = list(params.stop)
        if params.prediction and params.speculation and self.server.predicted_outputs:
            body["prediction"] = {"type": "content", "content": params.prediction}
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

    # --- the connection ------------------------------------------------------------------------

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


def _reported_context_lengths(data: dict[str, Any]) -> list[Any]:
    """Where servers put a model's window: vLLM ``max_model_len``, llama-server ``meta``."""
    meta = data.get("meta")
    if not isinstance(meta, dict):
        meta = {}
    return [data.get("max_model_len"), data.get("context_length"), meta.get("n_ctx")]


def _root(url: str) -> str:
    """A server's own root (its API root without ``/v1``), where counting endpoints are."""
    url = url.rstrip("/")
    return url.removesuffix("/v1") + "/" if url.endswith("/v1") else url + "/"


def _penalties_and_logprobs(params: SamplingParams) -> dict[str, Any]:
    """The penalties and logprobs of ``params`` in a Chat Completions request (OpenAI-compatible
    servers take them alike); only what differs from the defaults."""
    fields: dict[str, Any] = {}
    if params.frequency_penalty:
        fields["frequency_penalty"] = params.frequency_penalty
    if params.presence_penalty:
        fields["presence_penalty"] = params.presence_penalty
    if params.top_logprobs is not None:
        fields.update(logprobs=True, top_logprobs=params.top_logprobs)
    return fields
