"""Chat templates: the GGUF's own Jinja template, sandboxed, or a fallback per architecture."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NoReturn

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .generation import ChatMessage, ToolSpec

# Whitespace control (``-``) is used only where no newline of the format sits beside a tag.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages and messages[0].role == 'system' %}"
    "{% set prefix = messages[0].content + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}"
    "<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}\n"
    "{{ prefix if loop.first else '' }}{{ m.content | trim }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

CHATML_TEMPLATE = (
    "{% for m in messages %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_FALLBACKS = {"gemma": GEMMA_TEMPLATE, "gemma2": GEMMA_TEMPLATE, "gemma3": GEMMA_TEMPLATE}


class ChatTemplateError(ValueError):
    """The template refused the conversation (for example roles that do not alternate)."""


def fallback_template(architecture: str) -> str:
    """The template used for a model whose GGUF carries none."""
    return _FALLBACKS.get(architecture, CHATML_TEMPLATE)


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
