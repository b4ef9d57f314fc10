"""Ollama's API at ``<base_url>lmsp/ollama`` (and on the opt-in listener): thin handlers.

A client's Ollama host is ``http://<server><base_url>lmsp/ollama``; it appends ``/api/...``.
Generation runs the same service path as ``/lmsp/v1/responses`` (queue, batching, prefix
reuse, limits, cancellation when the client leaves); the wire objects and their translation
are :mod:`..protocol.ollama` and :mod:`..protocol.ollama_answers`, the model views
:mod:`..service.ollama`. Every error is Ollama's ``{"error": "..."}`` with LMSP's status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel
from tornado.httputil import HTTPServerRequest

from ..protocol.errors import LmspError
from ..protocol.events import ResponseEvent
from ..protocol.ollama import (
    OLLAMA_VERSION,
    KeepAlive,
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaShowRequest,
    chat_request,
    generate_request,
    keep_alive_seconds,
    raw_prompt,
)
from ..protocol.ollama_answers import (
    OllamaEmbeddingResponse,
    OllamaEmbedResponse,
    OllamaError,
    OllamaTranslator,
    OllamaVersion,
    Stopwatch,
    load_chunk,
)
from ..protocol.requests import ResponseRequest, parse_json_body, validate_request
from ..service.embeddings import Embeddings, check_dimensions
from ..service.ollama import OllamaModels
from .auth import Principal
from .operations import Operation
from .sse import EventStream, SsePayload, StreamingHandler

#: The prefix of Ollama's API under the server's base_url.
OLLAMA_PREFIX = "/lmsp/ollama"
#: Settings key of the opt-in listener's admission (a request → its principal, or refused).
GUARD_SETTING = "lmsp_ollama_guard"
Guard = Callable[[HTTPServerRequest], Principal]


def _operation(name: str, scope: Any = None) -> Operation:
    """An Ollama operation: its scope (Ollama's API is not in LMSP's OpenAPI document)."""
    return Operation(name, name, "ollama", {}, scope=scope)


class OllamaHandler(StreamingHandler):
    """The base of Ollama's handlers: Ollama's error shape, lenient bodies, and on the opt-in
    listener its own admission instead of Jupyter's."""

    async def prepare(self) -> None:  # type: ignore[override]
        guard: Guard | None = self.settings.get(GUARD_SETTING)
        if guard is None:
            await super().prepare()
            return
        self.principal = guard(self.request)
        origin = self.request.headers.get("Origin")
        if origin is not None:  # one the guard admitted: a loopback origin
            self.set_header("Access-Control-Allow-Origin", origin)
            self.add_header("Vary", "Origin")

    @property
    def ollama(self) -> OllamaModels:
        """This server's models as Ollama shows them."""
        return OllamaModels(self.models)

    def body(self) -> dict[str, Any]:
        """The request body as a JSON object, whatever its declared media type (as Ollama
        reads it); an empty body is an empty object."""
        limit: int = self.settings["lmsp_max_body_bytes"]
        if len(self.request.body) > limit:
            raise LmspError("payload_too_large", f"the body is over {limit} bytes")
        return parse_json_body(self.request.body or b"{}")

    async def embed(
        self,
        name: str,
        texts: list[str],
        dimensions: int | None,
        keep_alive: KeepAlive | None,
        truncate: bool = False,
    ) -> Embeddings:
        """The vectors of ``texts`` by the model Ollama's ``name`` means, which then stays
        loaded for ``keep_alive``; ``truncate``: texts over the window are cut to it."""
        embeddings = await self.embeddings.embed(
            self.ollama.entry(name),
            texts,
            keep_alive=keep_alive_seconds(keep_alive),
            truncate=truncate,
        )
        check_dimensions(embeddings, dimensions)
        return embeddings

    def write_json(self, model: BaseModel) -> None:
        """Send an Ollama object (fields without a value left out, as Ollama does)."""
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(model.model_dump_json(exclude_none=True))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Every error is ``{"error": "..."}``, never a traceback or a page."""
        error = self.error_of(status_code, **kwargs)
        self.set_status(error.status)
        for name, value in error.headers.items():
            self.set_header(name, value)
        if error.retry_after is not None:
            self.set_header("Retry-After", str(error.retry_after))
        message = error.detail or error.to_problem().title
        self.write_json(OllamaError(error=message))


class NdjsonStream(EventStream):
    """A response's events as Ollama's chunks, one JSON object a line; nothing while idle."""

    media_type = "application/x-ndjson"
    opening = b""
    keepalive = b""

    def __init__(self, handler: OllamaHandler, translator: OllamaTranslator) -> None:
        super().__init__(handler, handler.settings["lmsp_keepalive_seconds"])
        self.translator = translator

    def frame(self, event: SsePayload) -> bytes:
        assert isinstance(event, ResponseEvent)
        lines = (
            chunk.model_dump_json(exclude_none=True) + "\n" for chunk in self.translator.feed(event)
        )
        return "".join(lines).encode()


class _GeneratingHandler(OllamaHandler):
    """``/api/chat`` and ``/api/generate``: one run of the response service, streamed as
    NDJSON (the default) or answered whole."""

    kind: Literal["chat", "generate"]

    async def generate(
        self,
        request: OllamaChatRequest | OllamaGenerateRequest,
        build: Callable[[Any], ResponseRequest],
        loads_only: bool,
        raw: tuple[str, str | None] | None = None,
    ) -> None:
        """Answer ``request``, which ``build`` turns into a response request (with ``raw``,
        a text and a suffix, that text continued through no chat template); a request with
        nothing to generate (``loads_only``) loads its model, or unloads it (keep_alive 0)."""
        entry = self.ollama.entry(request.model)
        if loads_only:
            await self._load(request, entry.id)
            return
        if request.think and not self.ollama.thinks(entry):
            raise LmspError(
                "unsupported_capability", f'"{request.model}" does not support thinking'
            )
        stopwatch = Stopwatch()
        translator = OllamaTranslator(
            request.model, self.kind, stopwatch, thinking=request.think is not False
        )
        response_request = build(request).model_copy(update={"model": entry.id})
        owner = self.principal.owner
        if raw is None:
            run = await self.service.start(response_request, owner)
        else:
            run = await self.service.start_text(response_request, *raw, owner)
        if not request.stream:
            async for event in self.service.events(run, started=stopwatch.start):
                translator.feed(event)  # times the first token
            if run.error is not None:
                raise run.error
            self.write_json(translator.whole(run.response()))
            return
        self._stream = NdjsonStream(self, translator)
        await self._stream.send(self.service.events(run, started=stopwatch.start))
        self.finish()

    async def _load(
        self, request: OllamaChatRequest | OllamaGenerateRequest, model_id: str
    ) -> None:
        """Load the model now, or unload it with ``keep_alive`` 0. Without ``models:write``
        (the opt-in listener) a load is left to the first generation, an unload refused."""
        seconds = keep_alive_seconds(request.keep_alive)
        may_load = "models:write" in self.principal.scopes
        if seconds == 0:
            if not may_load:
                raise LmspError("insufficient_scope", "unloading models is not offered here")
            await self.models.unload(model_id)
            self.write_json(load_chunk(request.model, "unload", self.kind))
            return
        if may_load:
            await self.models.load(model_id, seconds)
        self.write_json(load_chunk(request.model, "load", self.kind))


class ChatHandler(_GeneratingHandler):
    """``POST /api/chat``."""

    kind = "chat"
    operations = {"post": _operation("ollamaChat", "responses:write")}

    async def post(self) -> None:
        request = validate_request(OllamaChatRequest, self.body())
        await self.generate(request, chat_request, loads_only=not request.messages)


class GenerateHandler(_GeneratingHandler):
    """``POST /api/generate``."""

    kind = "generate"
    operations = {"post": _operation("ollamaGenerate", "responses:write")}

    async def post(self) -> None:
        request = validate_request(OllamaGenerateRequest, self.body())
        empty = not (request.prompt or request.system or request.suffix)
        await self.generate(request, generate_request, empty, raw_prompt(request))


class EmbedHandler(OllamaHandler):
    """``POST /api/embed``: a normalized vector per text; no text loads the model (without
    ``models:write``, on the opt-in listener, a load is left to the first embedding)."""

    operations = {"post": _operation("ollamaEmbed", "responses:write")}

    async def post(self) -> None:
        request = validate_request(OllamaEmbedRequest, self.body())
        stopwatch = Stopwatch()
        texts = request.texts()
        if not texts and "models:write" not in self.principal.scopes:
            self.embeddings.check(self.ollama.entry(request.model))
            embeddings = Embeddings([], 0)
        else:
            embeddings = await self.embed(
                request.model, texts, request.dimensions, request.keep_alive, request.truncate
            )
        self.write_json(
            OllamaEmbedResponse(
                model=request.model,
                embeddings=embeddings.vectors,
                total_duration=stopwatch.clock() - stopwatch.arrived,
                prompt_eval_count=embeddings.tokens,
            )
        )


class EmbeddingsHandler(OllamaHandler):
    """``POST /api/embeddings``, Ollama's older endpoint: the prompt's vector, a prompt over
    the window cut to it (Ollama's runner always truncates here; it has no ``truncate``)."""

    operations = {"post": _operation("ollamaEmbeddings", "responses:write")}

    async def post(self) -> None:
        request = validate_request(OllamaEmbeddingsRequest, self.body())
        embeddings = await self.embed(
            request.model, [request.prompt], None, request.keep_alive, truncate=True
        )
        self.write_json(OllamaEmbeddingResponse(embedding=embeddings.vectors[0]))


class RootHandler(OllamaHandler):
    """``GET /``: what tools probe to see that Ollama runs."""

    operations = {"get": _operation("ollamaRoot")}

    def get(self) -> None:
        self.finish("Ollama is running", set_content_type="text/plain; charset=utf-8")

    head = get


class VersionHandler(OllamaHandler):
    """``GET /api/version``: the Ollama version whose API this follows."""

    operations = {"get": _operation("ollamaVersion")}

    def get(self) -> None:
        self.write_json(OllamaVersion(version=OLLAMA_VERSION))


class TagsHandler(OllamaHandler):
    """``GET /api/tags``: every model."""

    operations = {"get": _operation("ollamaTags", "models:read")}

    def get(self) -> None:
        self.write_json(self.ollama.tags())


class ShowHandler(OllamaHandler):
    """``POST /api/show``: one model's details, ``model_info`` and ``capabilities``."""

    operations = {"post": _operation("ollamaShow", "models:read")}

    def post(self) -> None:
        request = validate_request(OllamaShowRequest, self.body())
        self.write_json(self.ollama.show(request.model_name()))


class PsHandler(OllamaHandler):
    """``GET /api/ps``: the models in memory."""

    operations = {"get": _operation("ollamaPs", "models:read")}

    def get(self) -> None:
        self.write_json(self.ollama.running())


class ModelStoreHandler(OllamaHandler):
    """``pull``, ``push``, ``create``, ``copy``, ``delete``: this server runs the GGUF files it
    finds and changes none, so each is refused with a message saying what to do instead."""

    operations = {
        "post": _operation("ollamaModelStore", "models:write"),
        "delete": _operation("ollamaModelStore", "models:write"),
    }

    def post(self, action: str) -> None:
        raise LmspError(
            "unsupported_capability",
            f"this server does not {action} models: it serves the GGUF files it finds (in its "
            "model directories and Ollama's store); manage models with Ollama itself or put GGUF "
            "files in a model directory (LmspApp.model_dirs)",
        )

    delete = post


class OllamaNotFoundHandler(OllamaHandler):
    """Any other path of Ollama's API."""

    def get(self, path: str | None = None) -> None:
        raise LmspError("not_found", f"no Ollama endpoint at {self.request.path}")

    head = post = put = patch = delete = get
