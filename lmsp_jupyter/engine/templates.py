"""A conversation as prompt text: a chat model's own Jinja template, sandboxed, or a base
model's plain transcript (no template is ever invented for a model that has none)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NoReturn

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .generation import ChatMessage, ToolSpec


class ChatTemplateError(ValueError):
    """The template refused the conversation (for example roles that do not alternate)."""


def _raise_exception(message: str) -> NoReturn:
    raise ChatTemplateError(message)


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    """A compiled chat template; rendering runs in Jinja's immutable sandbox."""

    def __init__(self, source: str, *, bos_token: str, eos_token: str) -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = _tojson
        env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
        self.source = source
        try:
            self._template = env.from_string(source)
        except TemplateError as exc:
            raise ChatTemplateError(f"the model's chat template does not compile: {exc}") from None
        self._bos_token = bos_token
        self._eos_token = eos_token

    @property
    def supports_tools(self) -> bool:
        """Whether the template renders a ``tools`` list itself."""
        return "tools" in self.source

    @property
    def supports_reasoning(self) -> bool:
        """Whether the model was trained to think between ``<think>`` tags."""
        return THINK_OPEN in self.source

    def render(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        """The prompt text for ``messages``, ready for the model to continue.

        Tools go through the template when it knows them; otherwise a system turn describes
        them and the Hermes ``<tool_call>`` format the model should answer in.
        """
        if tools and not self.supports_tools:
            messages = _with_tool_instructions(messages, tools)
        variables: dict[str, Any] = {}
        if tools and self.supports_tools:
            variables["tools"] = [tool.as_template_dict() for tool in tools]
        try:
            return self._template.render(
                messages=[_plain(m, self.supports_tools) for m in messages],
                add_generation_prompt=add_generation_prompt,
                bos_token=self._bos_token,
                eos_token=self._eos_token,
                **variables,
            )
        except ChatTemplateError:
            raise
        except Exception as exc:  # a template is the model's code: any failure of it is refused
            raise ChatTemplateError(f"the model's chat template failed: {exc}") from None


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"


def _with_tool_instructions(
    messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
) -> list[ChatMessage]:
    listing = "\n".join(json.dumps(tool.as_template_dict(), ensure_ascii=False) for tool in tools)
    instructions = (
        "You may call these functions:\n"
        f"{listing}\n"
        "To call one, answer only with "
        f'{TOOL_CALL_OPEN}{{"name": <function name>, "arguments": <arguments object>}}'
        f"{TOOL_CALL_CLOSE}"
    )
    if messages and messages[0].role == "system":
        first = messages[0]
        merged = ChatMessage(role="system", content=f"{first.content}\n\n{instructions}")
        return [merged, *messages[1:]]
    return [ChatMessage(role="system", content=instructions), *messages]


def _plain(message: ChatMessage, native_tools: bool) -> dict[str, Any]:
    """A message for the template; calls become Hermes text where the template has no tools."""
    if native_tools or not message.tool_calls:
        return message.as_template_dict()
    calls = "".join(
        f"{TOOL_CALL_OPEN}{json.dumps(call['function'], ensure_ascii=False)}{TOOL_CALL_CLOSE}"
        for call in message.tool_calls
    )
    return {"role": message.role, "content": message.content + calls}


def transcript(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()) -> str:
    """A base model's prompt text for ``messages``: the conversation as plain text for it to
    continue, with no role markers (``docs/base-models.md``).

    One user message alone is its text as written. Otherwise the turns follow each other in
    order (system text, and the tools described as a template without tools has them, first):
    a turn the model wrote continues the text before it exactly as it was written (its calls
    in the ``<tool_call>`` format), and every other turn starts on a new line.
    """
    if tools:
        messages = _with_tool_instructions(messages, tools)
    text = ""
    for message in messages:
        if message.role != "assistant" and text and not text.endswith("\n"):
            text += "\n"
        text += _plain(message, native_tools=False)["content"]
    return text
