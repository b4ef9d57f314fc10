"""Tests for chat templates: the fallback per architecture and the sandbox GGUF templates use."""

from __future__ import annotations

import json
from typing import Literal

import pytest

from lmsp_jupyter.engine.generation import ChatMessage
from lmsp_jupyter.engine.templates import (
    CHATML_TEMPLATE,
    GEMMA_TEMPLATE,
    ChatTemplate,
    ChatTemplateError,
    fallback_template,
)

HI = [ChatMessage(role="user", content="Hi")]


def gemma() -> ChatTemplate:
    return ChatTemplate(fallback_template("gemma3"), bos_token="<bos>", eos_token="<eos>")


def compiled(source: str) -> ChatTemplate:
    return ChatTemplate(source, bos_token="<bos>", eos_token="<eos>")


# --- fallbacks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", ["gemma", "gemma2", "gemma3"])
def test_gemma_architectures_fall_back_to_the_gemma_template(architecture: str) -> None:
    assert fallback_template(architecture) == GEMMA_TEMPLATE


@pytest.mark.parametrize("architecture", ["llama", "qwen2", "phi3", ""])
def test_unknown_architecture_falls_back_to_chatml(architecture: str) -> None:
    assert fallback_template(architecture) == CHATML_TEMPLATE


Role = Literal["system", "user", "assistant", "tool"]


def chat(*turns: tuple[Role, str]) -> list[ChatMessage]:
    """Messages from ``(role, content)`` pairs."""
    return [ChatMessage(role=role, content=content) for role, content in turns]


#: name: (messages, add_generation_prompt, the Gemma template's rendering)
GEMMA: dict[str, tuple[list[ChatMessage], bool, str]] = {
    "one_user_message": (
        HI,
        True,
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    ),
    "without_generation_prompt_ends_after_the_last_turn": (
        HI,
        False,
        "<bos><start_of_turn>user\nHi<end_of_turn>\n",
    ),
    "folds_the_system_message_into_the_first_user_turn": (
        chat(("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello."), ("user", "Bye")),
        True,
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n",
    ),
    "names_the_assistant_model": (
        chat(("user", "Hi"), ("assistant", "Yo")),
        False,
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n",
    ),
    "trims_message_content": (
        chat(("user", "  Hi \n")),
        True,
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    ),
    "renders_a_tool_output_as_a_user_turn": (
        chat(
            ("user", "Weather?"),
            ("assistant", 'get_weather({"city": "Paris"})'),
            ("tool", "sunny"),
        ),
        True,
        "<bos><start_of_turn>user\nWeather?<end_of_turn>\n"
        '<start_of_turn>model\nget_weather({"city": "Paris"})<end_of_turn>\n'
        "<start_of_turn>user\nsunny<end_of_turn>\n"
        "<start_of_turn>model\n",
    ),
}


@pytest.mark.parametrize(("messages", "prompt", "rendered"), GEMMA.values(), ids=GEMMA.keys())
def test_gemma_template(messages: list[ChatMessage], prompt: bool, rendered: str) -> None:
    assert gemma().render(messages, add_generation_prompt=prompt) == rendered


def test_chatml_template_renders_every_role_and_the_assistant_prompt() -> None:
    template = ChatTemplate(fallback_template("llama"), bos_token="<s>", eos_token="</s>")
    messages = [
        ChatMessage(role="system", content="S"),
        ChatMessage(role="user", content="Hi"),
        ChatMessage(role="assistant", content="Yo"),
    ]
    assert template.render(messages) == (
        "<|im_start|>system\nS<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nYo<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


# --- GGUF templates ----------------------------------------------------------------------------


def test_raise_exception_in_a_template_raises_chat_template_error_with_its_message() -> None:
    source = (
        "{% for m in messages %}"
        "{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant') }}"
        "{% endif %}{{ m.content }}"
        "{% endfor %}"
    )
    template = compiled(source)
    assert template.render(HI) == "Hi"
    with pytest.raises(ChatTemplateError) as info:
        template.render([ChatMessage(role="user", content="a"), ChatMessage("user", "b")])
    assert str(info.value) == "Conversation roles must alternate user/assistant/user/assistant"


def test_template_that_does_not_compile_raises_chat_template_error() -> None:
    with pytest.raises(ChatTemplateError, match=r"^the model's chat template does not compile: "):
        compiled("{% if %}")


def test_template_using_an_undefined_name_raises_chat_template_error() -> None:
    with pytest.raises(ChatTemplateError) as info:
        compiled("{{ x.y }}").render(HI)
    assert str(info.value) == "the model's chat template failed: 'x' is undefined"


def test_sandbox_refuses_dunder_attribute_chains() -> None:
    template = compiled("{{ ''.__class__.__mro__ }}")
    with pytest.raises(ChatTemplateError) as info:
        template.render(HI)
    assert str(info.value) == (
        "the model's chat template failed: "
        "access to attribute '__class__' of 'str' object is unsafe."
    )


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__ }}",
        "{{ raise_exception.__globals__ }}",
        "{{ '{0.__class__}'.format('') }}",
        "{{ messages.__class__ }}",
    ],
)
def test_sandbox_leaks_no_python_internals(source: str) -> None:
    try:
        rendered = compiled(source).render(HI)
    except ChatTemplateError as exc:
        rendered = str(exc)
    assert "<class" not in rendered
    assert "__builtins__" not in rendered
    assert "module" not in rendered


@pytest.mark.parametrize(
    "source", ["{{ messages.append({'role': 'user'}) }}", "{{ messages[0].update({'a': 1}) }}"]
)
def test_sandbox_refuses_mutating_the_messages(source: str) -> None:
    with pytest.raises(ChatTemplateError, match="is unsafe"):
        compiled(source).render(HI)


def test_sandbox_range_limit_raises_chat_template_error() -> None:
    with pytest.raises(ChatTemplateError):
        compiled("{% for i in range(10 ** 9) %}{% endfor %}").render(HI)


def test_tojson_outputs_plain_json_without_html_escaping() -> None:
    rendered = compiled("{{ {'a': '<b>&\"é\\'', 'n': [1, 2.5, none, true]} | tojson }}").render(HI)
    assert rendered == '{"a": "<b>&\\"é\'", "n": [1, 2.5, null, true]}'
    assert json.loads(rendered) == {"a": "<b>&\"é'", "n": [1, 2.5, None, True]}


#: name: (a template's source, the messages, its rendering)
RENDERINGS: dict[str, tuple[str, list[ChatMessage], str]] = {
    "bos_and_eos_tokens": ("{{ bos_token }}|{{ eos_token }}", HI, "<bos>|<eos>"),
    "tojson_indent_is_honoured": ("{{ [1] | tojson(indent=2) }}", HI, "[\n  1\n]"),
    "messages_are_plain_mappings_with_role_and_content": (
        "{{ messages | tojson }}",
        HI,
        '[{"role": "user", "content": "Hi"}]',
    ),
    "loop_controls_are_available": (
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
        "{{ m.content }}{% endfor %}",
        chat(("user", "a"), ("assistant", "b")),
        "a",
    ),
}


@pytest.mark.parametrize(
    ("source", "messages", "rendered"), RENDERINGS.values(), ids=RENDERINGS.keys()
)
def test_a_gguf_template_renders(source: str, messages: list[ChatMessage], rendered: str) -> None:
    assert compiled(source).render(messages) == rendered
