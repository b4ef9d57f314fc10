"""The options of ``%lmsp ask``/``%%lmsp`` and the request they make, names from the namespace."""

from __future__ import annotations

import re
from typing import Any

import pytest
from IPython.core.error import UsageError
from pydantic import BaseModel

from lmsp_jupyter.kernel.options import AskOptions, parse_ask
from lmsp_jupyter.kernel.request import ask_request, fill
from lmsp_jupyter.kernel.tools import tool


def refused(message: str) -> Any:
    return pytest.raises(UsageError, match=f"^{re.escape(message)}$")


def test_options_then_the_rest_of_the_line_verbatim() -> None:
    line = (
        "--model gemma:2b --system 'Be brief.' --max-tokens=8 --temperature 0 "
        '--json {"type": "object"} --tools f, --continue   What\'s  "up" --now?'
    )
    with refused("--tools takes names separated by commas, not 'f,'"):
        parse_ask(line)
    assert parse_ask(line.replace("--tools f,", "--tools f,g --tool-choice g")) == AskOptions(
        prompt='What\'s  "up" --now?',
        model="gemma:2b",
        system="Be brief.",
        max_tokens=8,
        temperature=0.0,
        json='{"type": "object"}',
        tools=("f", "g"),
        tool_choice="g",
        continue_=True,
    )


def test_double_dash_ends_the_options() -> None:
    assert parse_ask("--max-tokens 3 -- --model is part of the prompt") == AskOptions(
        prompt="--model is part of the prompt", max_tokens=3
    )


def test_cell_magic_takes_the_prompt_from_the_body() -> None:
    assert parse_ask("--model m", "\nWrite a haiku.\n") == AskOptions(
        prompt="Write a haiku.", model="m"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--colour red hi", "unknown option --colour"),
        ("--model", "--model needs a value"),
        ("--model a --model b hi", "--model is given twice"),
        ("--max-tokens 0 hi", "--max-tokens takes a whole number ≥ 1, not '0'"),
        ("--max-tokens ten hi", "--max-tokens takes a whole number ≥ 1, not 'ten'"),
        ("--temperature 2.5 hi", "--temperature takes a number from 0 to 2, not '2.5'"),
        ("--temperature warm hi", "--temperature takes a number from 0 to 2, not 'warm'"),
        ("--frequency-penalty 3 hi", "--frequency-penalty takes a number from -2 to 2, not '3'"),
        ("--presence-penalty nan hi", "--presence-penalty takes a number from -2 to 2, not 'nan'"),
        ("--logprobs 21 hi", "--logprobs takes a whole number from 0 to 20, not '21'"),
        ("--logprobs -1 hi", "--logprobs takes a whole number from 0 to 20, not '-1'"),
        ("--system 'Be brief. hi", "--system: the quote ' is not closed"),
        ('--json {"type": } hi', "--json: not valid JSON: Expecting value at column 17"),
        ("--max-tokens 3", "the ask has no prompt"),
        ("", "the ask has no prompt"),
    ],
)
def test_bad_lines_are_refused_in_one_line(line: str, message: str) -> None:
    with refused(message):
        parse_ask(line)


def test_cell_magic_refuses_a_prompt_on_the_line() -> None:
    with refused("%%lmsp takes its prompt from the cell, not from the line: 'hello'"):
        parse_ask("--model m hello", "body")
    with refused("the ask has no prompt"):
        parse_ask("--model m", "  \n")


# --- {name} ----------------------------------------------------------------------------------


def test_fill_takes_names_from_the_namespace_and_keeps_other_braces() -> None:
    namespace = {"city": "Paris", "n": 3}
    text = 'Weather in {city} for {n} days as {"a": 1}, literally {{city}}.'
    assert fill(text, namespace) == 'Weather in Paris for 3 days as {"a": 1}, literally {city}.'


def test_fill_refuses_an_unknown_name() -> None:
    with refused("{town} names nothing in the namespace (write {{ for a brace)"):
        fill("Weather in {town}", {})


# --- the request ------------------------------------------------------------------------------


@tool
def weather(city: str) -> str:
    """The weather."""
    return city


@tool(name="clock")
def what_time() -> str:
    """The time."""
    return "noon"


class Sky(BaseModel):
    sky: str


def request_of(line: str, namespace: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    request, _ = ask_request(parse_ask(line), namespace or {}, default_model=lambda: "m", **kw)
    return request


def test_a_plain_ask_is_one_user_message_stored_for_continuation() -> None:
    assert request_of("Hi {name}", {"name": "Ada"}) == {
        "model": "m",
        "input": [{"type": "message", "role": "user", "content": "Hi Ada"}],
        "store": True,
    }


def test_penalties_and_logprobs_in_the_request() -> None:
    line = "--frequency-penalty 1.5 --presence-penalty -0.5 --logprobs 3 Count: one, two,"
    assert request_of(line) == {
        "model": "m",
        "input": [{"type": "message", "role": "user", "content": "Count: one, two,"}],
        "store": True,
        "frequency_penalty": 1.5,
        "presence_penalty": -0.5,
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 3,
    }


def test_every_option_in_the_request() -> None:
    namespace = {"weather": weather, "what_time": what_time, "tone": "dry"}
    line = (
        "--system 'Be {tone}.' --max-tokens 5 --temperature 0.5 --json Sky "
        "--tools weather,what_time --tool-choice what_time --prediction '{tone} sky' Go"
    )
    request, tools = ask_request(
        parse_ask(line),
        {**namespace, "Sky": Sky},
        default_model=lambda: "m",
        previous_response_id="resp_1",
    )
    assert tools == {"weather": weather, "clock": what_time}
    assert request == {
        "model": "m",
        "input": [
            {"type": "message", "role": "system", "content": "Be dry."},
            {"type": "message", "role": "user", "content": "Go"},
        ],
        "store": True,
        "max_output_tokens": 5,
        "temperature": 0.5,
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "Sky",
                "schema": {
                    "properties": {"sky": {"title": "Sky", "type": "string"}},
                    "required": ["sky"],
                    "title": "Sky",
                    "type": "object",
                },
                "strict": True,
            },
        },
        "tools": [weather.definition(), what_time.definition()],
        "tool_choice": {"type": "function", "name": "clock"},
        "previous_response_id": "resp_1",
        "extensions": {"x-lmsp-jupyter": {"prediction": {"type": "content", "content": "dry sky"}}},
    }


def test_json_from_a_dict_by_name_or_a_literal_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    by_name = request_of("--json shape Go", {"shape": schema})["response_format"]
    literal = request_of('--json {"type": "integer"} Go')["response_format"]
    assert by_name["json_schema"] == {"name": "shape", "schema": schema, "strict": True}
    assert literal["json_schema"] == {
        "name": "output",
        "schema": {"type": "integer"},
        "strict": True,
    }


@pytest.mark.parametrize("choice", ["auto", "required", "none", "weather", "clock"])
def test_tool_choices(choice: str) -> None:
    namespace = {"weather": weather, "what_time": what_time}
    request = request_of(f"--tools weather,what_time --tool-choice {choice} Go", namespace)
    named = choice not in ("auto", "required", "none")
    assert request["tool_choice"] == ({"type": "function", "name": choice} if named else choice)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--json Nope Go", "--json: 'Nope' names nothing in the namespace and is not JSON"),
        ("--json tone Go", "--json: 'tone' is neither a JSON Schema dict nor a pydantic model"),
        ("--tools nope Go", "--tools: 'nope' names nothing"),
        ("--tools tone Go", "--tools: 'tone' names no function decorated with @tool"),
        ("--tool-choice required Go", "--tool-choice required needs --tools or --mcp"),
        (
            "--tools weather --tool-choice clock Go",
            "--tool-choice 'clock' is not auto, required, none, one of --tools "
            "or LABEL:TOOL of --mcp",
        ),
    ],
)
def test_names_that_do_not_fit_are_refused(line: str, message: str) -> None:
    def no_service() -> str:
        raise AssertionError("the service is asked only once the names are resolved")

    with refused(message):
        ask_request(parse_ask(line), {"tone": "dry", "weather": weather}, default_model=no_service)


def test_context_sources_and_vars() -> None:
    assert parse_ask("--context cells,vars why").context == ("cells", "vars")
    listed = parse_ask("--vars df,arr why")
    assert (listed.vars, listed.context) == (("df", "arr"), ("vars",))
    with refused("--context takes cells, vars, error separated by commas, not 'notes'"):
        parse_ask("--context cells,notes why")
    with refused("--vars takes names separated by commas, not 'df,'"):
        parse_ask("--vars df, why")
    assert parse_ask("--context error", default="Explain.").prompt == "Explain."
