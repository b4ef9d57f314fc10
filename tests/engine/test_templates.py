"""Tests for prompts from conversations: chat templates in the sandbox GGUF templates use, and a
base model's plain transcript."""

from __future__ import annotations

import json
from typing import Literal

import pytest

from lmsp_jupyter.engine.generation import ChatMessage, ToolSpec
from lmsp_jupyter.engine.templates import ChatTemplate, ChatTemplateError, transcript
from tests.chat_template import GEMMA_TEMPLATE

HI = [ChatMessage(role="user", content="Hi")]
CHATML_TEMPLATE = (
    "{% for m in messages %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def gemma() -> ChatTemplate:
    return ChatTemplate(GEMMA_TEMPLATE, bos_token="<bos>", eos_token="<eos>")


def compiled(source: str) -> ChatTemplate:
    return ChatTemplate(source, bos_token="<bos>", eos_token="<eos>")


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
    template = ChatTemplate(CHATML_TEMPLATE, bos_token="<s>", eos_token="</s>")
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


# --- a base model's transcript -----------------------------------------------------------------

#: name: (messages, their transcript)
TRANSCRIPTS: dict[str, tuple[list[ChatMessage], str]] = {
    "one_user_message_is_its_text_as_written": (
        chat(("user", "  Country: France -> Capital:")),
        "  Country: France -> Capital:",
    ),
    "an_answer_continues_the_text_before_it_and_the_next_turn_starts_a_line": (
        chat(("user", "1, 2, 3"), ("assistant", ", 4, 5"), ("user", "10, 20")),
        "1, 2, 3, 4, 5\n10, 20",
    ),
    "no_line_is_added_after_a_text_that_ends_one": (
        chat(("user", "a\n"), ("assistant", "b\n"), ("user", "c")),
        "a\nb\nc",
    ),
    "system_text_comes_first_on_its_own_line": (
        chat(("system", "Capitals of Europe."), ("user", "France: Paris")),
        "Capitals of Europe.\nFrance: Paris",
    ),
    "a_tool_output_starts_a_line_after_its_call": (
        [
            ChatMessage("user", "Weather?"),
            ChatMessage(
                "assistant",
                "",
                ({"id": "c", "type": "function", "function": {"name": "w", "arguments": {}}},),
            ),
            ChatMessage("tool", "sunny", tool_call_id="c"),
        ],
        'Weather?<tool_call>{"name": "w", "arguments": {}}</tool_call>\nsunny',
    ),
}


@pytest.mark.parametrize(("messages", "text"), TRANSCRIPTS.values(), ids=TRANSCRIPTS.keys())
def test_transcript(messages: list[ChatMessage], text: str) -> None:
    assert transcript(messages) == text


def test_a_transcript_with_tools_describes_them_first_and_has_no_role_markers() -> None:
    spec = ToolSpec("get_weather", "The weather in a city.", {"type": "object"})
    text = transcript(chat(("user", "Weather in Paris?")), [spec])
    assert text.startswith("You may call these functions:\n")
    assert json.dumps(spec.as_template_dict()) in text
    assert text.endswith("</tool_call>\nWeather in Paris?")
    assert "<start_of_turn>" not in text and "user" not in text.lower().split()


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
