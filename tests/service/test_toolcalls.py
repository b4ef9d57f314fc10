"""Tests of parse_calls: the native tool-call formats of current chat templates (LMSP 1.0 6.5).

Besides hand-written answers, calls are rendered through chat templates written here in the
style of current GGUF templates, cut out of the prompt, and parsed back.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from lmsp_jupyter.engine.generation import ChatMessage, ToolSpec
from lmsp_jupyter.engine.templates import ChatTemplate
from lmsp_jupyter.protocol.requests import FunctionTool
from lmsp_jupyter.service.toolcalls import CALL_MARKERS, ParsedCall, parse_calls
from tests.chat_template import GEMMA_TEMPLATE

WEATHER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
    "required": ["city"],
    "additionalProperties": False,
}
TIME_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"zone": {"type": "string"}},
    "required": ["zone"],
}
TOOLS = [
    FunctionTool(type="function", name="get_weather", parameters=WEATHER_PARAMETERS),
    FunctionTool(type="function", name="get_time", parameters=TIME_PARAMETERS),
]
SPECS = [ToolSpec(t.name, "Weather or time", t.parameters) for t in TOOLS]

PARIS = ParsedCall("get_weather", '{"city": "Paris"}')
ROME = ParsedCall("get_weather", '{"city": "Rome", "unit": "C"}')
TOKYO = ParsedCall("get_time", '{"zone": "Asia/Tokyo"}')


# --- native formats ----------------------------------------------------------------------------

FORMATS: dict[str, tuple[str, list[ParsedCall]]] = {
    "hermes_one": (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        [PARIS],
    ),
    "hermes_two": (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"zone": "Asia/Tokyo"}}\n</tool_call>',
        [PARIS, TOKYO],
    ),
    "hermes_compact": (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        [PARIS],
    ),
    "mistral_list": (
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome", "unit": "C"}}, '
        '{"name": "get_time", "arguments": {"zone": "Asia/Tokyo"}}]',
        [ROME, TOKYO],
    ),
    "mistral_args": ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', [PARIS]),
    "llama_python_tag": (
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
        [PARIS],
    ),
    "llama_bare_json": ('{"name": "get_weather", "parameters": {"city": "Paris"}}', [PARIS]),
    "granite": (
        '<|tool_call|>[{"name": "get_time", "arguments": {"zone": "Asia/Tokyo"}}]',
        [TOKYO],
    ),
    "arguments_as_json_text": (
        '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}',
        [PARIS],
    ),
    "surrounding_whitespace": (
        '\n  <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n',
        [PARIS],
    ),
}


@pytest.mark.parametrize(("text", "calls"), FORMATS.values(), ids=FORMATS.keys())
def test_parse_calls_reads_each_native_format(text: str, calls: list[ParsedCall]) -> None:
    assert parse_calls(text, TOOLS) == calls


def test_every_format_starts_with_a_call_marker() -> None:
    for text, _ in FORMATS.values():
        assert text.lstrip().startswith(CALL_MARKERS)


TEXT_AROUND: dict[str, str] = {
    "before_hermes": (
        'Sure! <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    ),
    "after_hermes": (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call> Done.'
    ),
    "between_hermes": (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>and'
        '<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>'
    ),
    "after_mistral": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}] ok',
    "after_llama": '{"name": "get_weather", "parameters": {"city": "Paris"}} is the call',
    "before_llama": 'Call: {"name": "get_weather", "parameters": {"city": "Paris"}}',
    "after_granite": '<|tool_call|>[{"name": "get_time", "arguments": {"zone": "UTC"}}] hm',
    "plain_text": "It is sunny in Paris.",
}


INVALID_ARGUMENTS: dict[str, str] = {
    "missing_required": '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
    "wrong_type": '<tool_call>{"name": "get_weather", "arguments": {"city": 1}}</tool_call>',
    "not_in_enum": (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "K"}}'
        "</tool_call>"
    ),
    "extra_property": ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "country": "FR"}'),
    "not_an_object": '{"name": "get_weather", "parameters": ["Paris"]}',
    "not_json": '<tool_call>{"name": "get_weather", "arguments": {city: Paris}}</tool_call>',
    "unclosed": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}',
    "one_of_two_invalid": (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    ),
    "no_arguments": '<tool_call>{"name": "get_weather"}</tool_call>',
}


UNKNOWN_NAME: dict[str, str] = {
    "hermes": '<tool_call>{"name": "get_news", "arguments": {"city": "Paris"}}</tool_call>',
    "mistral_args": '[TOOL_CALLS]get_news[ARGS]{"city": "Paris"}',
    "llama": '<|python_tag|>{"name": "get_news", "parameters": {"city": "Paris"}}',
    "granite": '<|tool_call|>[{"name": "get_news", "arguments": {"city": "Paris"}}]',
    "name_not_text": '{"name": 3, "parameters": {"city": "Paris"}}',
}


EMPTY: dict[str, str] = {
    "empty": "",
    "blank": "   ",
    "empty_hermes": "<tool_call></tool_call>",
    "empty_mistral": "[TOOL_CALLS][]",
}
#: Text around a call, a call with invalid arguments, a call of an unknown name, no call at all.
NOT_CALLS = {
    f"{table}-{case}": text
    for table, cases in [
        ("text_around", TEXT_AROUND),
        ("invalid_arguments", INVALID_ARGUMENTS),
        ("unknown_name", UNKNOWN_NAME),
        ("empty", EMPTY),
    ]
    for case, text in cases.items()
}


@pytest.mark.parametrize("text", NOT_CALLS.values(), ids=NOT_CALLS.keys())
def test_text_that_is_not_a_valid_call_of_a_given_tool_is_not_a_call(text: str) -> None:
    assert parse_calls(text, TOOLS) is None


def test_no_tools_means_no_call() -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert parse_calls(text, []) is None


# --- calls rendered by chat templates ----------------------------------------------------------

#: A ChatML template in the Qwen 2.5 / Qwen 3 / Hermes style: tools in the system turn, an
#: assistant turn's calls as ``<tool_call>`` blocks, tool results as ``<tool_response>``.
QWEN_STYLE = """\
{% if tools %}
<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}
# Tools

These functions are available; their signatures follow, one per line, inside <tools></tools>:
<tools>
{% for tool in tools %}
{{ tool | tojson }}
{% endfor %}
</tools>

To call one, write its name and its arguments as JSON inside <tool_call></tool_call> tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}
<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{% for message in messages %}
{% if message.role == 'system' %}
{% elif message.role == 'assistant' %}
<|im_start|>assistant
{% if message.content %}
{{ message.content }}
{% endif %}
{% for call in message.tool_calls or [] %}
{% if message.content or not loop.first %}

{% endif %}
<tool_call>
{"name": {{ call.function.name | tojson }}, "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{% endfor %}
<|im_end|>
{% elif message.role == 'tool' %}
<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
"""

#: A template in the Llama 3.1 style: tools described in the first user turn, a call as a bare
#: ``{"name": ..., "parameters": ...}`` object, tool results in an ``ipython`` turn.
LLAMA_STYLE = """\
{{ bos_token }}
{%- if messages[0].role == 'system' %}
{% set system = messages[0].content %}{% set turns = messages[1:] %}
{% else %}
{% set system = '' %}{% set turns = messages %}
{% endif %}
<|start_header_id|>system<|end_header_id|>

Environment: ipython
{{ system }}<|eot_id|>
{% for message in turns %}
{% if loop.first and tools %}
<|start_header_id|>user<|end_header_id|>

You can call the functions below. To call one, reply with nothing but JSON of the form \
{"name": function name, "parameters": object of argument names and values}.

{% for tool in tools %}
{{ tool | tojson(indent=4) }}

{% endfor %}
{{ message.content }}<|eot_id|>
{% elif message.role == 'assistant' and message.tool_calls %}
<|start_header_id|>assistant<|end_header_id|>

{% for call in message.tool_calls %}
{"name": {{ call.function.name | tojson }}, "parameters": {{ call.function.arguments | tojson }}}\
{% endfor %}
<|eot_id|>
{% elif message.role == 'tool' %}
<|start_header_id|>ipython<|end_header_id|>

{{ message.content }}<|eot_id|>
{% else %}
<|start_header_id|>{{ message.role }}<|end_header_id|>

{{ message.content }}<|eot_id|>
{% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|start_header_id|>assistant<|end_header_id|>

{% endif %}
"""

QWEN_TURN = re.compile(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", re.S)
LLAMA_TURN = re.compile(
    r"<\|start_header_id\|>assistant<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>", re.S
)
GEMMA_TURN = re.compile(r"<start_of_turn>model\n(.*?)<end_of_turn>", re.S)


def compiled(source: str) -> ChatTemplate:
    return ChatTemplate(source, bos_token="<bos>", eos_token="<eos>")


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An assistant call as the conversation hands it to templates."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def conversation(*calls: dict[str, Any]) -> list[ChatMessage]:
    """A user question, the assistant's ``calls``, the tools' answers and a follow-up."""
    return [
        ChatMessage(role="system", content="You are terse."),
        ChatMessage(role="user", content="Weather in Paris, and the time in Tokyo?"),
        ChatMessage(role="assistant", content="", tool_calls=calls),
        *[
            ChatMessage(role="tool", content=f"result {c['id']}", tool_call_id=c["id"])
            for c in calls
        ],
        ChatMessage(role="user", content="Thanks."),
    ]


def assistant_turn(pattern: re.Pattern[str], prompt: str) -> str:
    """The one completed assistant turn's text in ``prompt``."""
    (turn,) = pattern.findall(prompt)
    assert isinstance(turn, str)
    return turn


PARIS_CALL = call("call_1", "get_weather", {"city": "Paris"})
TOKYO_CALL = call("call_2", "get_time", {"zone": "Asia/Tokyo"})


def test_qwen_style_template_takes_tools_itself() -> None:
    template = compiled(QWEN_STYLE)
    assert template.supports_tools
    prompt = template.render(conversation(PARIS_CALL), SPECS)
    (system,) = re.findall(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", prompt, re.S)
    assert system.startswith("You are terse.\n\n# Tools")
    for spec in SPECS:
        assert json.dumps(spec.as_template_dict()) in system
    assert "You may call these functions" not in prompt  # no fallback instructions
    assert prompt.endswith("<|im_start|>assistant\n")


def test_qwen_style_rendered_call_is_parsed_back_to_the_same_name_and_arguments() -> None:
    prompt = compiled(QWEN_STYLE).render(conversation(PARIS_CALL), SPECS)
    turn = assistant_turn(QWEN_TURN, prompt)
    assert turn == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    )
    assert parse_calls(turn, TOOLS) == [PARIS]


def test_qwen_style_two_rendered_calls_are_parsed_back_in_order() -> None:
    prompt = compiled(QWEN_STYLE).render(conversation(PARIS_CALL, TOKYO_CALL), SPECS)
    turn = assistant_turn(QWEN_TURN, prompt)
    assert turn.count("<tool_call>") == 2
    assert parse_calls(turn, TOOLS) == [PARIS, TOKYO]


def test_llama_style_rendered_call_is_parsed_back_to_the_same_name_and_arguments() -> None:
    template = compiled(LLAMA_STYLE)
    assert template.supports_tools
    prompt = template.render(conversation(PARIS_CALL), SPECS)
    assert json.dumps(SPECS[0].as_template_dict(), indent=4) in prompt
    turn = assistant_turn(LLAMA_TURN, prompt)
    assert turn == '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert parse_calls(turn, TOOLS) == [PARIS]
    assert parse_calls(f"<|python_tag|>{turn}", TOOLS) == [PARIS]


def test_a_template_without_tools_gets_a_system_turn_listing_them_and_the_call_format() -> None:
    template = compiled(GEMMA_TEMPLATE)
    assert not template.supports_tools
    prompt = template.render([ChatMessage(role="user", content="Weather in Paris?")], SPECS)
    for spec in SPECS:
        assert json.dumps(spec.as_template_dict(), ensure_ascii=False) in prompt
    assert "<tool_call>" in prompt and "</tool_call>" in prompt
    (first,) = re.findall(r"<start_of_turn>user\n(.*?)<end_of_turn>", prompt, re.S)
    assert first.startswith("You may call these functions:\n")
    assert first.endswith("\n\nWeather in Paris?")
    assert prompt.endswith("<start_of_turn>model\n")


def test_a_template_without_tools_keeps_the_system_message_before_the_tool_instructions() -> None:
    messages = [
        ChatMessage(role="system", content="You are terse."),
        ChatMessage(role="user", content="Weather in Paris?"),
    ]
    prompt = compiled(GEMMA_TEMPLATE).render(messages, SPECS)
    (first,) = re.findall(r"<start_of_turn>user\n(.*?)<end_of_turn>", prompt, re.S)
    assert first.startswith("You are terse.\n\nYou may call these functions:\n")
    assert first.endswith("Weather in Paris?")


def test_a_template_without_tools_renders_an_earlier_call_as_tool_call_text() -> None:
    prompt = compiled(GEMMA_TEMPLATE).render(conversation(PARIS_CALL, TOKYO_CALL), SPECS)
    turn = assistant_turn(GEMMA_TURN, prompt)
    assert turn == (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        '<tool_call>{"name": "get_time", "arguments": {"zone": "Asia/Tokyo"}}</tool_call>'
    )
    assert parse_calls(turn, TOOLS) == [PARIS, TOKYO]


def test_a_template_without_tools_renders_an_earlier_call_even_without_tools_offered() -> None:
    prompt = compiled(GEMMA_TEMPLATE).render(conversation(PARIS_CALL))
    assert "You may call these functions" not in prompt
    turn = assistant_turn(GEMMA_TURN, prompt)
    assert turn == '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
