"""Tests of the JSON Schema → GBNF grammar: which schemas the decoder can enforce exactly."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from lmsp_jupyter.engine.generation import GrammarError
from lmsp_jupyter.engine.grammar import (
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    check_enforceable,
    json_schema_grammar,
)


def nested(levels: int) -> dict[str, Any]:
    """A string schema wrapped in ``levels`` objects: its innermost schema is ``levels`` deep."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def of_size(size: int) -> dict[str, Any]:
    """A schema whose JSON text is exactly ``size`` characters long."""
    empty = len(json.dumps({"type": "string", "description": ""}))
    schema = {"type": "string", "description": "x" * (size - empty)}
    assert len(json.dumps(schema)) == size
    return schema


ACCEPTED: dict[str, dict[str, Any]] = {
    "nested_objects": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "address": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "address"],
    },
    "arrays": {
        "type": "array",
        "items": {"type": "array", "items": {"type": "number"}},
    },
    "enum": {"enum": ["red", "green", 3, None]},
    "const": {"type": "object", "properties": {"kind": {"const": "point"}}},
    "any_of": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
    "ref_to_defs": {
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
    },
    "min_length": {"type": "string", "minLength": 2},
    "max_length": {"type": "string", "maxLength": 8},
    "min_items": {"type": "array", "items": {"type": "boolean"}, "minItems": 1},
    "max_items": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    "format_date": {"type": "string", "format": "date"},
    "annotations": {
        "title": "T",
        "description": "D",
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "boolean",
    },
}

REFUSED_KEYWORDS: dict[str, dict[str, Any]] = {
    "minimum": {"type": "integer", "minimum": 1},
    "multipleOf": {"type": "integer", "multipleOf": 2},
    "not": {"type": "object", "not": {"required": ["a"]}},
    "oneOf": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    "allOf": {"allOf": [{"type": "string"}, {"maxLength": 3}]},
    "patternProperties": {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
    "uniqueItems": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
}


#: Places a child schema can sit; an unenforceable keyword there is refused as well.
def _inside(child: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        "property": {"type": "object", "properties": {"a": child}},
        "items": {"type": "array", "items": child},
        "any_of": {"anyOf": [{"type": "null"}, child]},
        "defs": {"$defs": {"c": child}, "$ref": "#/$defs/c"},
        "additional_properties": {"type": "object", "additionalProperties": child},
        "prefix_items": {"type": "array", "prefixItems": [child]},
    }


# --- accepted ----------------------------------------------------------------------------------


@pytest.mark.parametrize("schema", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_check_enforceable_accepts_the_keywords_the_grammar_enforces(
    schema: dict[str, Any],
) -> None:
    check_enforceable(schema)  # no GrammarError


def test_check_enforceable_accepts_a_schema_nested_exactly_the_maximum_depth() -> None:
    assert MAX_SCHEMA_DEPTH == 16
    check_enforceable(nested(16))  # no GrammarError


def test_check_enforceable_accepts_a_schema_of_exactly_64_kib() -> None:
    assert MAX_SCHEMA_BYTES == 64 * 1024
    check_enforceable(of_size(64 * 1024))  # no GrammarError


# --- refused -----------------------------------------------------------------------------------


@pytest.mark.parametrize("keyword", REFUSED_KEYWORDS)
def test_check_enforceable_refuses_keywords_the_grammar_cannot_enforce(keyword: str) -> None:
    with pytest.raises(GrammarError, match=re.escape(f"'{keyword}'")):
        check_enforceable(REFUSED_KEYWORDS[keyword])


@pytest.mark.parametrize("place", _inside({}).keys())
def test_check_enforceable_refuses_an_unenforceable_keyword_in_any_child_schema(
    place: str,
) -> None:
    schema = _inside({"type": "integer", "minimum": 0})[place]
    with pytest.raises(GrammarError, match="'minimum'"):
        check_enforceable(schema)


@pytest.mark.parametrize("fmt", ["email", "uri", "ipv4", "hostname"])
def test_check_enforceable_refuses_an_unknown_format(fmt: str) -> None:
    with pytest.raises(GrammarError, match=f"format '{fmt}'"):
        check_enforceable({"type": "string", "format": fmt})


@pytest.mark.parametrize(
    "ref", ["https://example.com/schema.json", "other.json#/$defs/a", "#/properties/a"]
)
def test_check_enforceable_refuses_a_reference_outside_defs(ref: str) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"$ref": ref}}}
    with pytest.raises(GrammarError, match="only local references"):
        check_enforceable(schema)


def test_check_enforceable_refuses_a_schema_nested_17_levels() -> None:
    with pytest.raises(GrammarError, match="deeper than 16 levels"):
        check_enforceable(nested(17))


def test_check_enforceable_refuses_a_schema_over_64_kib() -> None:
    with pytest.raises(GrammarError, match=f"over {64 * 1024} bytes"):
        check_enforceable(of_size(64 * 1024 + 1))


def test_check_enforceable_refuses_an_unknown_type_as_an_invalid_schema() -> None:
    with pytest.raises(GrammarError, match="not a valid JSON Schema"):
        check_enforceable({"type": ["string", "date"]})


def test_check_enforceable_refuses_an_unenforceable_keyword_in_list_items() -> None:
    with pytest.raises(GrammarError):
        check_enforceable({"type": "array", "items": [{"type": "integer", "minimum": 1}]})


MALFORMED: dict[str, dict[str, Any]] = {
    "properties_list": {"type": "object", "properties": []},
    "defs_list": {"$defs": []},
    "format_list": {"type": "string", "format": ["date"]},
    "type_object": {"type": {"a": 1}},
    "min_length_string": {"type": "string", "minLength": "2"},
}


@pytest.mark.parametrize("schema", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_keyword_of_the_wrong_type_is_a_grammar_error(schema: dict[str, Any]) -> None:
    with pytest.raises(GrammarError):
        json_schema_grammar(schema)


# --- the grammar -------------------------------------------------------------------------------


@pytest.mark.parametrize("schema", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_json_schema_grammar_returns_gbnf_with_a_root_rule(schema: dict[str, Any]) -> None:
    grammar = json_schema_grammar(schema)
    rules = [line for line in grammar.splitlines() if line.strip()]
    assert sum(line.startswith("root ::= ") for line in rules) == 1
    assert all(re.match(r"^[A-Za-z0-9-]+ ::= ", line) for line in rules), grammar


def test_json_schema_grammar_follows_the_property_order() -> None:
    schema = {
        "type": "object",
        "properties": {"b": {"type": "integer"}, "a": {"type": "string"}},
        "required": ["a", "b"],
    }
    root = next(
        line for line in json_schema_grammar(schema, ["a", "b"]).splitlines() if line[:4] == "root"
    )
    assert root.index("a-kv") < root.index("b-kv")


def test_json_schema_grammar_refuses_what_check_enforceable_refuses() -> None:
    with pytest.raises(GrammarError, match="'minimum'"):
        json_schema_grammar({"type": "integer", "minimum": 1})


def test_json_schema_grammar_refuses_a_reference_to_a_missing_definition() -> None:
    with pytest.raises(GrammarError, match="cannot be turned into a grammar"):
        json_schema_grammar({"$ref": "#/$defs/missing"})
