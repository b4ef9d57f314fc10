"""The streamed answer of an OpenAI-compatible server: its Chat Completion (or Completion)
chunks read as generation events, and its errors put into words."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import httpx

from ..generation import (
    CancelToken,
    EngineError,
    GenerationDone,
    GenerationEvent,
    ReasoningDelta,
    StopReason,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
)

#: How often a generation waiting for the server looks at its cancel token.
CANCEL_POLL_SECONDS = 0.05


class Retryable(Exception):
    """The server said it cannot answer now; nothing of the answer has come."""


class Lost(Exception):
    """The connection broke after part of the answer came."""


class ChunkStream:
    """The generation events of one streamed Chat Completion: ``Retryable`` while nothing of
    the answer came, ``Lost`` once part of it did."""

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
            raise Lost(describe(exc)) from None
        finally:
            await lines.aclose()
        if self.finish is None:
            if ended:  # llama-cpp-python's server, for one, cuts answers short this way
                raise EngineError("the server ended the answer without saying why")
            if not self.started:
                raise Retryable("it closed the stream before answering")
            raise Lost("the stream ended before the answer did")
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
            raise EngineError(f"the server failed: {error_message(chunk['error'])}")
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
            content = delta.get("content") or choice.get("text")  # a Completion's chunk: text
            if isinstance(content, str) and content:
                self.deltas += 1
                events.append(TextDelta(content, _logprobs(choice.get("logprobs"))))
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


def error_message(error: Any) -> str:
    """A server's ``error`` object in a few words."""
    if isinstance(error, dict):
        return str(error.get("message") or error)[:500]
    return str(error)[:500]


def error_text(response: httpx.Response) -> str:
    """What an error reply of the server says."""
    try:
        return error_message(response.json().get("error") or response.json().get("detail"))
    except (ValueError, AttributeError):
        return response.text[:500]


def describe(exc: BaseException) -> str:
    """A transport failure in a few words: its kind, and its message if it has one."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _logprobs(given: Any) -> tuple[TokenLogprob, ...]:
    """A chunk's ``logprobs.content`` (OpenAI's shape) as the engine's entries; what is not
    in that shape is left out."""
    content = given.get("content") if isinstance(given, dict) else None
    return tuple(
        TokenLogprob(
            _token_bytes(entry),
            float(entry.get("logprob", 0.0)),
            tuple(
                (_token_bytes(top), float(top.get("logprob", 0.0)))
                for top in entry.get("top_logprobs") or []
                if isinstance(top, dict)
            ),
        )
        for entry in content or []
        if isinstance(entry, dict)
    )


def _token_bytes(entry: dict[str, Any]) -> bytes:
    """A logprob entry's token: its ``bytes`` if given, else its text."""
    given = entry.get("bytes")
    if isinstance(given, list) and all(isinstance(b, int) and 0 <= b < 256 for b in given):
        return bytes(given)
    return str(entry.get("token", "")).encode()
