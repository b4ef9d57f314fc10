"""A hostile client: bad input is a 400 naming what is wrong, never a 5xx, a leak or a hang.

Sections 1, 9.3 and 10 of the spec, tried against the live server (real model) with the
requests a careless or malicious client sends: pathological JSON, pathological JSON Schemas,
oversized strings and arrays, and combinations the spec does not allow. Every reply is also
checked for leaks: no traceback, no token, no path of the server's own files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lmsp_jupyter.protocol.items import MAX_ITEMS, MAX_TEXT_CHARS
from lmsp_jupyter.protocol.requests import MAX_JSON_DEPTH
from tests.conftest import EDITOR_TOKEN, MODEL, READER_TOKEN, LiveServer
from tests.server.helpers import assert_problem

JSON = {"Content-Type": "application/json"}


def ask(**fields: object) -> dict[str, object]:
    """A small, valid request that the test then spoils."""
    return {"model": MODEL, "input": "Say a.", "temperature": 0, "max_output_tokens": 2, **fields}


def raw(fragment: str) -> bytes:
    """A request body whose ``max_output_tokens`` is ``fragment``, written as it is."""
    return f'{{"model": "{MODEL}", "input": "x", "max_output_tokens": {fragment}}}'.encode()


@pytest.fixture
def hostile(live_server: LiveServer) -> Iterator[httpx.Client]:
    """The live server's client, checking every reply it gets for leaks."""

    def no_leak(response: httpx.Response) -> None:
        response.read()
        text = response.text
        for secret in (live_server.token, EDITOR_TOKEN, READER_TOKEN):
            assert secret not in text, text[:300]
        assert "Traceback" not in text and 'File "' not in text, text[:300]
        for private in (live_server.root_dir.rsplit("/", 1)[0], "site-packages", "/root", "/home"):
            assert private not in text, text[:300]

    with live_server.client(event_hooks={"response": [no_leak]}) as client:
        yield client


def invalid(response: httpx.Response, param: str | None = None) -> dict[str, Any]:
    """A 400 ``invalid_request``, naming ``param`` when given."""
    problem = assert_problem(response, 400, "invalid_request")
    if param is not None:
        assert problem.get("param") == param, problem
    return problem


# --- pathological JSON ------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5_000, 200_000])
def test_nesting_deeper_than_the_limit_is_invalid_request(
    hostile: httpx.Client, depth: int
) -> None:
    nested = "[" * depth + "]" * depth
    body = f'{{"model": "{MODEL}", "input": "x", "extensions": {{"x-a": {nested}}}}}'
    problem = invalid(hostile.post("/responses", content=body.encode(), headers=JSON))
    assert problem["detail"] == f"the body nests deeper than {MAX_JSON_DEPTH} levels"


def test_nesting_within_the_limit_is_accepted(hostile: httpx.Client) -> None:
    depth = MAX_JSON_DEPTH - 3  # the body, "extensions" and "x-a" are three levels
    nested = "[" * depth + "]" * depth
    body = f'{{"model": "nope", "input": "x", "extensions": {{"x-a": {nested}}}}}'
    response = hostile.post("/responses", content=body.encode(), headers=JSON)
    assert_problem(response, 404, "model_not_found")  # parsed, then refused for its model


@pytest.mark.parametrize(
    "fragment",
    ["9" * 5000, "1" + "0" * 70, "-" + "9" * 100, "1e999", "-1e999", "1" + "0" * 400 + ".0"],
)
def test_huge_numbers_are_invalid_request(hostile: httpx.Client, fragment: str) -> None:
    invalid(hostile.post("/responses", content=raw(fragment), headers=JSON))


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_standard_literals_are_invalid_request(hostile: httpx.Client, literal: str) -> None:
    problem = invalid(hostile.post("/responses", content=raw(literal), headers=JSON))
    assert problem["detail"] == f"the body is not valid JSON: {literal} is not a JSON value"


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "a", "model": "b", "input": "x"}',
        b'{"model": "m", "input": [{"type": "message", "role": "user", "role": "system",'
        b' "content": "x"}]}',
    ],
)
def test_duplicate_keys_are_invalid_request(hostile: httpx.Client, body: bytes) -> None:
    problem = invalid(hostile.post("/responses", content=body, headers=JSON))
    assert "appears twice" in str(problem["detail"])


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "m", "input": "\xff"}',
        b'{"model": "m", "input": "\xc3"}',
        b'{"model": "m", "input": "\xed\xa0\x80"}',  # a surrogate encoded as UTF-8
        b'\xef\xbb\xbf{"model": "m", "input": "x"}',  # a byte order mark
        json.dumps({"model": "m", "input": "x"}).encode("utf-16"),
    ],
)
def test_bodies_that_are_not_utf_8_json_are_invalid_request(
    hostile: httpx.Client, body: bytes
) -> None:
    problem = invalid(hostile.post("/responses", content=body, headers=JSON))
    assert str(problem["detail"]).startswith("the body is not valid JSON")


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "m", "input": "\\ud800"}',
        b'{"model": "m", "input": "a\\udfffb"}',
        b'{"model": "m", "input": "x", "extensions": {"x-\\ud83d": 1}}',
        b'{"model": "m", "input": [{"type": "message", "role": "user",'
        b' "content": [{"type": "input_text", "text": "\\udc00\\ud800"}]}]}',
    ],
)
def test_lone_surrogates_are_invalid_request(hostile: httpx.Client, body: bytes) -> None:
    problem = invalid(hostile.post("/responses", content=body, headers=JSON))
    assert problem["detail"] == "the body is not valid JSON: a string has a lone surrogate"


def test_a_surrogate_pair_is_one_character_and_accepted(hostile: httpx.Client) -> None:
    body = b'{"model": "nope", "input": "\\ud83d\\ude00"}'
    assert_problem(hostile.post("/responses", content=body, headers=JSON), 404, "model_not_found")


@pytest.mark.parametrize("path", ["/responses", "/tasks"])
def test_pathological_json_is_refused_by_every_creating_endpoint(
    hostile: httpx.Client, path: str
) -> None:
    for body in (raw("NaN"), b'{"a": 1, "a": 2}', b'{"a": "\\ud800"}', b"[" * 10_000):
        invalid(hostile.post(path, content=body, headers=JSON))


# --- pathological schemas ---------------------------------------------------------------------


def nested_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


PATHOLOGICAL_SCHEMAS = {
    "too deep": nested_schema(40),
    "too big": {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(1000)},
    },
    "a reference to itself": {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    "a cycle of references": {
        "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}},
        "$ref": "#/$defs/a",
    },
    "a backreference": {"type": "string", "pattern": "^(a)\\1$"},
    "a lookahead": {"type": "string", "pattern": "^(?=a)a+$"},
    "a broken pattern": {"type": "string", "pattern": "(("},
    "a huge minLength": {"type": "string", "minLength": 100_000_000},
    "a huge maxLength": {"type": "string", "maxLength": 100_000_000},
    "a huge minItems": {"type": "array", "minItems": 100_000_000},
    "nested quantifiers": {"type": "string", "pattern": "^(a+)+$"},
    "a repeated alternation": {"type": "string", "pattern": "^(a|aa)*$"},
    "a huge repeat count": {"type": "string", "pattern": "^a{100000000}$"},
    "a long minLength beside a pattern": {"type": "string", "minLength": 4000, "pattern": "^a*$"},
    "not a schema": {"type": "no-such-type"},
}


def in_response_format(schema: dict[str, Any]) -> dict[str, object]:
    return ask(
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    )


def in_a_tool(schema: dict[str, Any]) -> dict[str, object]:
    parameters = {"type": "object", "properties": {"v": schema}, "required": ["v"]}
    tool = {"type": "function", "name": "f", "parameters": parameters}
    return ask(tools=[tool], tool_choice="required")


@pytest.mark.parametrize("name", PATHOLOGICAL_SCHEMAS)
def test_pathological_schema_in_response_format_is_invalid_request(
    hostile: httpx.Client, name: str
) -> None:
    body = in_response_format(PATHOLOGICAL_SCHEMAS[name])
    invalid(hostile.post("/responses", json=body), "response_format")


@pytest.mark.parametrize("name", PATHOLOGICAL_SCHEMAS)
def test_pathological_schema_in_tool_parameters_is_invalid_request(
    hostile: httpx.Client, name: str
) -> None:
    problem = invalid(hostile.post("/responses", json=in_a_tool(PATHOLOGICAL_SCHEMAS[name])))
    assert str(problem["param"]).startswith("tools"), problem


def test_pathological_schema_in_a_task_names_the_field_inside_request(
    hostile: httpx.Client,
) -> None:
    body = {"type": "response", "request": in_response_format(PATHOLOGICAL_SCHEMAS["too deep"])}
    invalid(hostile.post("/tasks", json=body), "request.response_format")


# --- oversized strings and arrays -------------------------------------------------------------


def test_text_over_its_limit_is_invalid_request_naming_it(hostile: httpx.Client) -> None:
    part = {"type": "input_text", "text": "x" * (MAX_TEXT_CHARS + 1)}
    body = ask(input=[{"type": "message", "role": "user", "content": [part]}])
    invalid(hostile.post("/responses", json=body), "input[0].content[0].text")


def test_input_over_its_item_limit_is_invalid_request_naming_it(hostile: httpx.Client) -> None:
    item = {"type": "message", "role": "user", "content": "x"}
    invalid(hostile.post("/responses", json=ask(input=[item] * (MAX_ITEMS + 1))), "input")


def test_too_many_tools_is_invalid_request_naming_tools(hostile: httpx.Client) -> None:
    tools = [{"type": "function", "name": f"f{i}"} for i in range(129)]
    invalid(hostile.post("/responses", json=ask(tools=tools)), "tools")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"model": "m" * 513}, "model"),
        ({"previous_response_id": "r" * 256}, "previous_response_id"),
        ({"stop": ["a"] * 5}, "stop"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata.k"),
    ],
)
def test_oversized_fields_are_invalid_request_naming_them(
    hostile: httpx.Client, fields: dict[str, object], param: str
) -> None:
    invalid(hostile.post("/responses", json=ask(**fields)), param)


def test_a_huge_input_is_refused_as_context_length_exceeded(hostile: httpx.Client) -> None:
    response = hostile.post("/responses", json=ask(input="word " * 200_000))
    assert_problem(response, 400, "context_length_exceeded")


# --- combinations the spec does not allow -----------------------------------------------------


def test_tool_choice_required_without_tools_is_invalid_request_naming_tool_choice(
    hostile: httpx.Client,
) -> None:
    for body in (ask(tool_choice="required"), ask(tool_choice="required", tools=[])):
        invalid(hostile.post("/responses", json=body), "tool_choice")
    task = {"type": "response", "request": ask(tool_choice="required")}
    invalid(hostile.post("/tasks", json=task), "request.tool_choice")


def test_tool_choice_naming_no_tool_is_invalid_request(hostile: httpx.Client) -> None:
    body = ask(tool_choice={"type": "function", "name": "f"})
    invalid(hostile.post("/responses", json=body), "tool_choice.name")


def test_refused_input_leaves_nothing_behind(hostile: httpx.Client) -> None:
    before = hostile.get("/tasks", params={"limit": 100}).json()["data"]
    for body in (ask(tool_choice="required"), in_response_format(nested_schema(40))):
        invalid(hostile.post("/tasks", json={"type": "response", "request": body}))
    assert hostile.get("/tasks", params={"limit": 100}).json()["data"] == before


# --- headers and query parameters -------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "param"),
    [({"limit": "0"}, "limit"), ({"limit": "1e3"}, "limit"), ({"status": "done"}, "status")],
)
def test_bad_list_parameters_are_invalid_request(
    hostile: httpx.Client, params: dict[str, str], param: str
) -> None:
    invalid(hostile.get("/tasks", params=params), param)


def test_query_that_is_not_utf_8_is_a_problem_not_a_page(live_server: LiveServer) -> None:
    response = httpx.get(
        f"{live_server.lmsp}/tasks?status=%ff",
        headers={"Authorization": f"Bearer {live_server.token}"},
    )
    assert_problem(response, 400, "invalid_request")


# --- leaks ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model", ["/etc/passwd", "../../../../etc/passwd", "~/.ssh/id_rsa", "C:\\Windows\\win.ini"]
)
def test_a_path_as_model_is_model_not_found_without_touching_it(
    hostile: httpx.Client, model: str
) -> None:
    problem = assert_problem(
        hostile.post("/responses", json=ask(model=model)), 404, "model_not_found"
    )
    assert problem["param"] == "model"


def test_configured_tokens_with_the_same_name_are_separate_owners() -> None:
    from lmsp_jupyter.server.auth import ScopedTokens, hash_token

    scopes = ["responses:read", "tasks:read"]
    tokens = ScopedTokens(
        [
            {"name": "ci", "sha256": hash_token("first"), "scopes": scopes},
            {"name": "ci", "sha256": hash_token("second"), "scopes": scopes},
        ]
    )
    first, second = tokens.find("Bearer first"), tokens.find("Bearer second")
    assert first is not None and second is not None
    assert first.owner != second.owner
    assert "first" not in first.owner and "second" not in second.owner
