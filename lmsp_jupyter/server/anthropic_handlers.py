"""Anthropic's Messages API at ``<base_url>lmsp/anthropic``: thin handlers.

A client's base URL is ``http://<server><base_url>lmsp/anthropic``; it appends ``/v1/...``
(Claude Code adds ``?beta=true``, which changes nothing). Generation runs the same service
path as ``/lmsp/v1/responses`` (queue, batching, prefix reuse, limits, cancellation when the
client leaves); the wire objects and their translation are :mod:`..protocol.anthropic` and
:mod:`..protocol.anthropic_answers`, the model names :mod:`..service.anthropic`. The key is
the Jupyter token or a scoped one, as ``x-api-key`` or ``Authorization: Bearer``;
``anthropic-version`` and ``anthropic-beta`` are accepted and change nothing. Every error is
Anthropic's ``{"type": "error", "error": {...}}`` with Anthropic's status.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from ..protocol.anthropic import (
    CountTokensRequest,
    MessagesRequest,
    messages_param,
    messages_request,
)
from ..protocol.anthropic_answers import (
    AnthropicStreamEvent,
    MessageStream,
    Ping,
    TokenCount,
    anthropic_error,
    message,
)
from ..protocol.errors import LmspError
from ..protocol.models import Scope
from ..protocol.requests import ResponseRequest, validate_request
from ..service.anthropic import AnthropicModels
from ..service.run import ResponseRun
from .operations import Operation
from .sse import EventStream, StreamingHandler, sse_frame

#: The prefix of Anthropic's API under the server's base_url.
ANTHROPIC_PREFIX = "/lmsp/anthropic"


def _operation(name: str, scope: Scope | None = None) -> Operation:
    """An operation of Anthropic's API: its scope (it is not in LMSP's OpenAPI document)."""
    return Operation(name, name, "anthropic", {}, scope=scope)


class AnthropicHandler(StreamingHandler):
    """The base of Anthropic's handlers: ``x-api-key`` as a key, Anthropic's error shape."""

    cors_request_headers = (
        f"{StreamingHandler.cors_request_headers}, x-api-key, anthropic-version, "
        "anthropic-beta, anthropic-dangerous-direct-browser-access"
    )

    async def prepare(self) -> None:  # type: ignore[override]
        headers = self.request.headers
        key = headers.get("x-api-key")
        if key and not headers.get("Authorization"):  # the key is the token a Bearer would carry
            headers["Authorization"] = f"Bearer {key}"
        await super().prepare()

    @property
    def anthropic(self) -> AnthropicModels:
        """This server's models as Anthropic's clients name them."""
        models: AnthropicModels = self.settings["lmsp_anthropic"]
        return models

    def response_request(self, request: CountTokensRequest) -> ResponseRequest:
        """The response request that does what ``request`` asks, on the model its name means."""
        try:
            return messages_request(request, self.anthropic.resolve(request.model))
        except LmspError as error:  # name the field as the Messages request calls it
            error.rename_param(messages_param)
            raise

    def write_json(self, model: BaseModel) -> None:
        """Send an Anthropic object."""
        self.set_header("Content-Type", "application/json")
        self.finish(model.model_dump_json())

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Every error is Anthropic's error object, never a traceback or a page."""
        error = self.error_of(status_code, **kwargs)
        message = error.detail or error.to_problem().title
        status, body = anthropic_error(error.status, error.code, message, error.param)
        self.set_status(status, "Overloaded" if status == 529 else None)
        if error.code != "forbidden_origin":  # ``send_error`` cleared them; a browser reads this
            self.set_cors_headers()
        for name, value in error.headers.items():
            self.set_header(name, value)
        if error.retry_after is not None:
            self.set_header("Retry-After", str(error.retry_after))
        self.write_json(body)


class MessageEventStream(EventStream):
    """A Messages stream: Anthropic's events, a ``ping`` event while idle."""

    opening = b""
    keepalive = sse_frame(Ping())


class MessagesHandler(AnthropicHandler):
    """``POST /v1/messages``: an answer, whole or streamed as Anthropic's events."""

    operations = {"post": _operation("anthropicMessages", "responses:write")}

    async def post(self) -> None:
        request = validate_request(MessagesRequest, self.json_body())
        response_request = self.response_request(request)
        owner = self.principal.owner
        with self.limits.request(owner):
            try:
                run = await self.service.start(response_request, owner)
            except LmspError as error:
                error.rename_param(messages_param)
                raise
            translator = MessageStream(
                run.response(), request.model, thinking=request.shows_thinking
            )
            if not request.stream:
                response = await self.service.complete(run)
                self.write_json(message(response, request.model, thinking=request.shows_thinking))
                return
            self._stream = MessageEventStream(self, self.settings["lmsp_keepalive_seconds"])
            await self._stream.send(self._events(run, translator))
            self.finish()

    async def _events(
        self, run: ResponseRun, translator: MessageStream
    ) -> AsyncIterator[AnthropicStreamEvent]:
        for opening in translator.first(run.prompt.length):
            yield opening
        events = self.service.events(run)
        async with contextlib.aclosing(events):
            async for event in events:
                for answer in translator.feed(event):
                    yield answer


class CountTokensHandler(AnthropicHandler):
    """``POST /v1/messages/count_tokens``: the prompt's tokens, in the model's own tokens."""

    operations = {"post": _operation("anthropicCountTokens", "responses:write")}

    async def post(self) -> None:
        request = validate_request(CountTokensRequest, self.json_body())
        try:
            tokens = await self.service.count(self.response_request(request), self.principal.owner)
        except LmspError as error:
            error.rename_param(messages_param)
            raise
        self.write_json(TokenCount(input_tokens=tokens))


class ModelsHandler(AnthropicHandler):
    """``GET /v1/models``: the generation models."""

    operations = {"get": _operation("anthropicModels", "models:read")}

    def get(self) -> None:
        self.write_json(self.anthropic.listing())


class ModelHandler(AnthropicHandler):
    """``GET /v1/models/{model_id}``: one model, by its id or a name ``model_map`` maps."""

    operations = {"get": _operation("anthropicModel", "models:read")}

    def get(self, model_id: str) -> None:
        self.write_json(self.anthropic.get(model_id))


class AnthropicNotFoundHandler(AnthropicHandler):
    """Any other path of Anthropic's API (batches, files, ...)."""

    def get(self, path: str | None = None) -> None:
        raise LmspError("not_found", f"no endpoint of Anthropic's API at {self.request.path}")

    head = post = put = patch = delete = get
