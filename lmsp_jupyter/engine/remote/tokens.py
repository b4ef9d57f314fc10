"""How many tokens a prompt is on an OpenAI-compatible server, which renders it itself.

llama-server renders the messages (``/apply-template``) and tokenizes the text; vLLM tokenizes
messages (``/tokenize``); llama-cpp-python's server tokenizes text only
(``/extras/tokenize/count``), so its count is an estimate. A server with none of these gets an
upper bound.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

import httpx

from ..generation import ChatMessage, ToolSpec

T = TypeVar("T")

#: Prompt tokens a chat template may add around each message (role markers), and once (a
#: default system text), beyond the text it is given: the margin of a prompt's upper bound.
TEMPLATE_TOKENS_PER_MESSAGE = 16
TEMPLATE_TOKENS = 256

#: The ways a server may count a prompt (``none``: it does not; the bound stands in).
Counting = Literal["llama-server", "vllm", "extras", "none"]


class PromptCounter:
    """Counts prompts on one server, the way it turned out to count them."""

    def __init__(self, root: str) -> None:
        #: The server's own root (its API root without ``/v1``), where counting endpoints are.
        self.root = root
        self.counting: Counting | None = None  # found out at the first count

    async def count(
        self,
        http: httpx.AsyncClient,
        remote_id: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
    ) -> tuple[int, bool]:
        """The prompt's tokens as the server counts them, and whether the count is exact.

        Each way is tried in turn the first time; the one that works is kept. A server with
        none gets the upper bound (every token stands for at least one byte of text). A
        transport error is raised as it is.
        """
        wire = {"messages": [wire_message(message) for message in messages]}
        if tools:
            wire["tools"] = [tool.as_template_dict() for tool in tools]
        ways: tuple[Counting, ...] = (
            (self.counting,) if self.counting else ("llama-server", "vllm", "extras")
        )
        for way in ways:
            counted = await self._count_by(http, way, remote_id, wire)
            if counted is not None:
                self.counting = way
                return counted
        self.counting = "none"
        return bound(messages, tools), False

    async def _count_by(
        self, http: httpx.AsyncClient, way: Counting, remote_id: str, wire: dict[str, Any]
    ) -> tuple[int, bool] | None:
        """The count one way, or ``None`` if the server does not count that way."""
        root = self.root
        if way == "llama-server":
            rendered = await http.post(f"{root}apply-template", json=wire)
            prompt = json_field(rendered, "prompt", str)
            if prompt is None:
                return None
            body = {"content": prompt, "add_special": True, "parse_special": True}
            tokens = json_field(await http.post(f"{root}tokenize", json=body), "tokens", list)
            return None if tokens is None else (len(tokens), True)
        if way == "vllm":
            body = {"model": remote_id, "add_generation_prompt": True, **wire}
            count = json_field(await http.post(f"{root}tokenize", json=body), "count", int)
            return None if count is None else (count, True)
        if way == "extras":
            body = {"model": remote_id, "input": plain_text(wire)}
            response = await http.post(f"{root}extras/tokenize/count", json=body)
            count = json_field(response, "count", int)
            if count is None:
                return None
            margin = TEMPLATE_TOKENS_PER_MESSAGE * len(wire["messages"]) + TEMPLATE_TOKENS
            return count + margin, False
        return None


def wire_message(message: ChatMessage) -> dict[str, Any]:
    """A chat turn as Chat Completions takes it: call arguments are JSON text there."""
    wire = message.as_template_dict()
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                **call,
                "function": {
                    **call["function"],
                    "arguments": json_text(call["function"].get("arguments")),
                },
            }
            for call in message.tool_calls
        ]
    return wire


def bound(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> int:
    """At least as many tokens as any template makes of ``messages`` and ``tools``: a token
    stands for at least one byte of text, plus the markers a template adds."""
    text = sum(len(json.dumps(wire_message(m), ensure_ascii=False).encode()) for m in messages)
    text += sum(len(json.dumps(tool.as_template_dict()).encode()) for tool in tools)
    return text + TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + TEMPLATE_TOKENS


def plain_text(wire: dict[str, Any]) -> str:
    """Messages and tools as plain text, each message a role line and its content."""
    lines = [f"{m['role']}\n{m.get('content') or ''}" for m in wire["messages"]]
    lines += [json.dumps(m["tool_calls"]) for m in wire["messages"] if m.get("tool_calls")]
    lines += [json.dumps(tool) for tool in wire.get("tools", [])]
    return "\n".join(lines)


def json_field(response: httpx.Response, name: str, kind: type[T]) -> T | None:
    """``response``'s JSON field ``name`` if it answered 200 with one of that ``kind``."""
    if response.status_code != 200:
        return None
    try:
        value = response.json().get(name)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


def json_text(value: Any) -> str:
    """``value`` as JSON text (a string is taken to be JSON text already)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
