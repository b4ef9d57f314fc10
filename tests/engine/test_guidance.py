"""Tests of JSON Schema constraints with llguidance: which schemas are refused, and the matcher
of one sequence over the bundled model's real vocabulary (no weights are loaded)."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import numpy as np
import pytest

from lmsp_jupyter.engine.generation import EngineError, GrammarError
from lmsp_jupyter.engine.guidance import (
    MAX_JSON_DEPTH,
    MAX_PATTERN_MIN_LENGTH,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_COUNT,
    MAX_SCHEMA_DEPTH,
    NUMBER_LIMIT,
    SchemaCompiler,
    SchemaMatcher,
    check_schema,
)
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer

END_OF_TURN_ID = 106
NEWLINE_ID = 107

CHECKER = jsonschema.FormatChecker()

EMAIL = {"type": "string", "format": "email"}
POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
    "additionalProperties": False,
}
TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer"},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["v"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}

#: Schema, then texts it admits and texts it refuses (with the compiler's ", " and ": ").
CASES: dict[str, tuple[dict[str, Any], list[str], list[str]]] = {
    "integer_bounds": (
        {"type": "integer", "minimum": 1, "maximum": 10},
        ["1", "7", "10"],
        ["0", "11", "-3"],
    ),
    "exclusive_bounds": (
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        ["0.5", "0.25"],
        ["0", "1", "1.5"],
    ),
    "multiple_of": ({"type": "integer", "multipleOf": 3}, ["9", "0", "-6"], ["10", "4"]),
    "integers_within_2_53_where_unbounded": (
        {"type": "integer"},
        ["0", "-12", str(NUMBER_LIMIT), str(-NUMBER_LIMIT)],
        [str(NUMBER_LIMIT + 1), str(-NUMBER_LIMIT - 1), "12345678901234567890"],
    ),
    "a_bound_the_schema_sets_is_kept": (
        {"type": "integer", "minimum": 5},
        ["5", str(NUMBER_LIMIT)],
        ["4", str(NUMBER_LIMIT + 1)],
    ),
    "a_bound_beyond_the_default_is_kept": (
        {"type": "integer", "maximum": 10**17},
        [str(10**17), str(-NUMBER_LIMIT)],
        [str(10**17 + 1), str(-NUMBER_LIMIT - 1)],
    ),
    "numbers_with_at_most_10_decimals": (
        {"type": "number"},
        ["0.5", "-2", "3.1415926535"],
        ["3.14159265358", "1e3", str(NUMBER_LIMIT + 1)],
    ),
    "a_multiple_the_schema_sets_is_kept": (
        {"type": "number", "multipleOf": 0.25},
        ["0.25", "2.75", "2"],
        ["0.3", "0.125"],
    ),
    "nullable_integers_bounded_too": (
        {"type": ["integer", "null"]},
        ["null", "7"],
        [str(NUMBER_LIMIT + 1)],
    ),
    "email": (EMAIL, ['"ada@example.com"'], ['"ada"', '"@example.com"']),
    "date": ({"type": "string", "format": "date"}, ['"2024-02-29"'], ['"2024-13-01"', '"24-1-1"']),
    "uuid": (
        {"type": "string", "format": "uuid"},
        ['"123e4567-e89b-12d3-a456-426614174000"'],
        ['"123e4567"'],
    ),
    "one_of_disjoint": (
        {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        ['"x"', "4"],
        ["true", "1.5"],
    ),
    "all_of": (
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}}, "required": ["b"]},
            ]
        },
        ['{"a": 1, "b": "x"}'],
        ['{"a": 1}', '{"b": "x"}'],
    ),
    "recursive_ref": (
        TREE,
        ['{"v": 1}', '{"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3}]}'],
        ['{"kids": []}', '{"v": 1, "kids": [{}]}'],
    ),
    "max_properties": (
        {"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 1},
        ["{}", '{"a": 1}'],
        ['{"a": 1, "b": 2}'],
    ),
    "unicode_enum": (
        {"enum": ["日本", "café", "🙂"]},
        ['"日本"', '"café"', '"🙂"'],
        ['"中国"', '"cafe"'],
    ),
    "array_of_objects": (
        {"type": "array", "items": POINT, "minItems": 1, "maxItems": 2},
        ['[{"x": 1, "y": 2}]', '[{"x": 1, "y": 2}, {"x": 3, "y": 4}]'],
        ["[]", '[{"x": 1}]', '[{"x": 1, "y": 2}, {"x": 3, "y": 4}, {"x": 5, "y": 6}]'],
    ),
    "unique_items_false": (
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": False},
        ["[1, 1]"],
        ["[1, true]"],
    ),
    "listed_properties_only": (
        {"type": "object", "properties": {"a": {"type": "integer"}}},
        ['{"a": 1}', "{}"],
        ['{"a": 1, "b": 2}'],
    ),
    "escaped_control_characters": (
        {"type": "string"},
        ['"a\\nb"', '"tab\\there"', '"\\u0001"'],
        ['"a\nb"', '"tab\there"', '"\x01"'],
    ),
}

REFUSED: dict[str, tuple[Any, str]] = {
    "unique_items": ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    "not": ({"not": {"type": "string"}}, "not"),
    "if_then": ({"if": {"type": "string"}, "then": {"minLength": 1}}, "if"),
    "contains": ({"type": "array", "contains": {"type": "integer"}}, "contains"),
    "overlapping_one_of": ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf"),
    "remote_ref": ({"$ref": "https://example.com/schema.json"}, "example.com"),
    "missing_ref": ({"$ref": "#/$defs/missing"}, "missing"),
    "unsatisfiable_bounds": ({"type": "integer", "minimum": 5, "maximum": 1}, "minimum"),
    "bad_pattern": ({"type": "string", "pattern": "(a"}, "regex"),
    "invalid_schema": ({"type": "strange"}, "not a valid JSON Schema"),
    "not_a_schema": ([{"type": "string"}], "must be an object or a boolean"),
}


def nested(levels: int) -> dict[str, Any]:
    """A string schema wrapped in ``levels`` objects: its innermost schema is ``levels`` deep."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def of_size(size: int) -> dict[str, Any]:
    """A schema whose JSON text is exactly ``size`` bytes long."""
    empty = len(json.dumps({"type": "string", "description": ""}))
    return {"type": "string", "description": "x" * (size - empty)}


@pytest.fixture(scope="module")
def compiler(tokenizer: LlamaTokenizer) -> SchemaCompiler:
    return tokenizer.schemas


def tokens(compiler: SchemaCompiler, text: str) -> list[int]:
    return compiler.tokenizer.tokenize_str(text)


def admits(compiler: SchemaCompiler, schema: Any, text: str) -> bool:
    """Whether the matcher lets ``text`` through token by token and may end after it."""
    matcher = compiler.matcher(schema)
    for token in tokens(compiler, text):
        if not matcher.allows(token):
            return False
        matcher.accept(token)
    return matcher.allows(END_OF_TURN_ID)


def allowed(matcher: SchemaMatcher, size: int) -> np.ndarray:
    logits = np.zeros(size, dtype=np.float32)
    matcher.mask_logits(logits)
    return np.isfinite(logits)


# --- which schemas are refused -----------------------------------------------------------------


@pytest.mark.parametrize(("schema", "good", "bad"), CASES.values(), ids=CASES.keys())
def test_check_schema_accepts_what_llguidance_enforces(
    schema: dict[str, Any], good: list[str], bad: list[str]
) -> None:
    check_schema(schema)  # no GrammarError


@pytest.mark.parametrize(("schema", "words"), REFUSED.values(), ids=REFUSED.keys())
def test_check_schema_refuses_what_llguidance_cannot_enforce(schema: Any, words: str) -> None:
    with pytest.raises(GrammarError, match=re.escape(words)):
        check_schema(schema)


def test_check_schema_keeps_the_depth_limit() -> None:
    check_schema(nested(MAX_SCHEMA_DEPTH))
    with pytest.raises(GrammarError, match=f"deeper than {MAX_SCHEMA_DEPTH} levels"):
        check_schema(nested(MAX_SCHEMA_DEPTH + 1))


def test_check_schema_limits_the_nesting_of_values_too() -> None:
    value: Any = 1
    for _ in range(MAX_JSON_DEPTH + 1):
        value = [value]
    with pytest.raises(GrammarError, match=f"deeper than {MAX_JSON_DEPTH} JSON levels"):
        check_schema({"const": value})


#: Counts and patterns whose compilation or validation would take huge memory or time.
EXPENSIVE: dict[str, tuple[Any, str]] = {
    "huge_min_length": ({"type": "string", "minLength": 100_000_000}, "minLength is over"),
    "huge_max_length": ({"type": "string", "maxLength": 1e8}, "maxLength is over"),
    "huge_min_items": ({"type": "array", "minItems": 100_000_000}, "minItems is over"),
    "huge_max_properties": ({"type": "object", "maxProperties": 10**9}, "maxProperties is over"),
    "nested_quantifiers": ({"type": "string", "pattern": "^(a+)+$"}, "nests variable"),
    "repeated_alternation": ({"type": "string", "pattern": "^(a|aa)*$"}, "repeats an alternation"),
    "huge_repeat": ({"type": "string", "pattern": "^a{100000000}$"}, "repeats over"),
    "nested_repeats": ({"type": "string", "pattern": "^(a{1,1000}){1,1000}$"}, "repeats over"),
    "pattern_property": (
        {"type": "object", "patternProperties": {"^(a+)+$": {"type": "string"}}},
        "nests variable",
    ),
    "deep_inside": (
        {"type": "object", "properties": {"a": {"type": "array", "items": {"maxLength": 10**8}}}},
        "maxLength is over",
    ),
    "long_min_length_beside_a_pattern": (
        {"type": "string", "minLength": MAX_PATTERN_MIN_LENGTH + 1, "pattern": "^a*$"},
        "minLength beside a pattern",
    ),
}


@pytest.mark.parametrize(("schema", "words"), EXPENSIVE.values(), ids=EXPENSIVE.keys())
def test_check_schema_refuses_expensive_counts_and_patterns_at_once(
    schema: Any, words: str
) -> None:
    with pytest.raises(GrammarError, match=re.escape(words)):
        check_schema(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "maxLength": MAX_SCHEMA_COUNT},
        {"type": "array", "minItems": 2, "maxItems": MAX_SCHEMA_COUNT},
        {"type": "string", "minLength": MAX_PATTERN_MIN_LENGTH, "pattern": "^a*$"},
        {"type": "string", "pattern": "^([A-Z]{3}-){2}[a-z]+$"},  # fixed counts may nest
        {"type": "string", "pattern": "^(ab)+(c|d)$"},
        {"properties": {"minLength": {"type": "string"}}},  # a property, not the keyword
    ],
)
def test_check_schema_accepts_counts_and_patterns_within_the_limits(schema: Any) -> None:
    check_schema(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "minLength": MAX_PATTERN_MIN_LENGTH, "pattern": "^a*$"},
        {"type": "string", "pattern": f"^a{{{MAX_SCHEMA_COUNT}}}$"},
        {"type": "string", "minLength": MAX_SCHEMA_COUNT},
    ],
)
def test_schemas_at_the_limits_decode_over_the_real_vocabulary(
    compiler: SchemaCompiler, schema: Any
) -> None:
    matcher = compiler.matcher(schema)
    logits = np.zeros(compiler.tokenizer.vocab_size, dtype=np.float32)
    for _ in range(8):  # past the opening quote: where the decoder would give up
        for token in matcher.forced():
            matcher.accept(token)
        masked = logits.copy()
        matcher.mask_logits(masked)
        matcher.accept(int(np.argmax(masked)))


def test_check_schema_keeps_the_size_limit() -> None:
    check_schema(of_size(MAX_SCHEMA_BYTES))
    with pytest.raises(GrammarError, match=f"over {MAX_SCHEMA_BYTES} bytes"):
        check_schema(of_size(MAX_SCHEMA_BYTES + 1))


# --- the matcher over the real vocabulary ------------------------------------------------------


@pytest.mark.parametrize(("schema", "good", "bad"), CASES.values(), ids=CASES.keys())
def test_matcher_admits_exactly_the_valid_texts(
    compiler: SchemaCompiler, schema: dict[str, Any], good: list[str], bad: list[str]
) -> None:
    for text in good:
        jsonschema.validate(json.loads(text), schema, format_checker=CHECKER)
        assert admits(compiler, schema, text), text
    for text in bad:
        assert not admits(compiler, schema, text), text


def test_no_token_with_a_raw_control_character_is_allowed_inside_a_string(
    compiler: SchemaCompiler,
) -> None:
    matcher = compiler.matcher({"type": "object", "properties": {"s": {"type": "string"}}})
    for token in tokens(compiler, '{"s": "a'):
        matcher.accept(token)
    size = compiler.tokenizer.vocab_size
    ok = np.nonzero(allowed(matcher, size))[0]
    assert len(ok) > 1000
    assert not matcher.allows(NEWLINE_ID)
    for allowed_token in ok:
        piece = compiler.tokenizer.decode_bytes([int(allowed_token)])
        assert not any(byte < 0x20 for byte in piece), piece


def test_mask_and_allows_agree(compiler: SchemaCompiler) -> None:
    matcher = compiler.matcher({"type": "array", "items": {"type": "integer", "maximum": 50}})
    for token in tokens(compiler, "[12, "):
        matcher.accept(token)
    mask = allowed(matcher, compiler.tokenizer.vocab_size)
    sample = range(0, compiler.tokenizer.vocab_size, 97)
    assert [matcher.allows(t) for t in sample] == [bool(mask[t]) for t in sample]
    assert mask.any()


def test_mask_covers_logits_longer_than_the_vocabulary(compiler: SchemaCompiler) -> None:
    matcher = compiler.matcher({"type": "boolean"})
    logits = np.zeros(compiler.tokenizer.vocab_size + 5, dtype=np.float32)
    matcher.mask_logits(logits)
    assert np.isneginf(logits[-5:]).all()
    assert not matcher.allows(compiler.tokenizer.vocab_size + 1)


def test_lazy_sampling_picks_the_masked_argmax_at_temperature_0(compiler: SchemaCompiler) -> None:
    random = np.random.default_rng(7)
    for _ in range(20):
        matcher = compiler.matcher({"type": "object", "properties": {"n": {"type": "integer"}}})
        for token in tokens(compiler, '{"n": '):
            matcher.accept(token)
        logits = random.standard_normal(compiler.tokenizer.vocab_size).astype(np.float32)
        lazy = int(np.argmax(logits))
        if not matcher.allows(lazy):
            masked = logits.copy()
            matcher.mask_logits(masked)
            lazy = int(np.argmax(masked))
        matcher.mask_logits(logits)
        assert lazy == int(np.argmax(logits))


def test_forced_tokens_spell_the_call_envelope_up_to_the_arguments(
    compiler: SchemaCompiler,
) -> None:
    envelope = {
        "type": "object",
        "properties": {"name": {"const": "get_weather"}, "arguments": POINT},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
    matcher = compiler.matcher(envelope)
    forced = matcher.forced()
    assert compiler.tokenizer.decode_str(forced) == '{"name": "get_weather", "arguments": {"x":'
    for token in forced:
        matcher.accept(token)
    assert matcher.forced() == []  # " " may start a longer token such as " 1"
    assert not matcher.finished()


def test_end_of_turn_only_once_the_json_is_whole(compiler: SchemaCompiler) -> None:
    matcher = compiler.matcher({"type": "integer"})
    assert not matcher.allows(END_OF_TURN_ID)
    matcher.accept(tokens(compiler, "4")[0])
    assert matcher.allows(END_OF_TURN_ID)
    assert not matcher.finished()  # "42" may still follow


def test_finished_once_nothing_may_follow(compiler: SchemaCompiler) -> None:
    matcher = compiler.matcher(POINT)
    for token in tokens(compiler, '{"x": 1, "y": 2'):
        matcher.accept(token)
    assert not matcher.finished()
    matcher.accept(tokens(compiler, "}")[0])
    assert matcher.finished()


def test_accepting_a_token_the_schema_refuses_is_an_engine_error(
    compiler: SchemaCompiler,
) -> None:
    matcher = compiler.matcher({"type": "boolean"})
    with pytest.raises(EngineError, match="constrained decoding failed"):
        matcher.accept(tokens(compiler, "7")[0])


def test_matchers_of_one_schema_are_independent(compiler: SchemaCompiler) -> None:
    first, second = compiler.matcher(POINT), compiler.matcher(POINT)
    for token in first.forced():
        first.accept(token)
    assert compiler.tokenizer.decode_str(second.forced()) == '{"x":'


def test_property_order_of_the_schema_is_kept(compiler: SchemaCompiler) -> None:
    schema = {
        "type": "object",
        "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}},
        "required": ["zeta", "alpha"],
        "additionalProperties": False,
    }
    assert admits(compiler, schema, '{"zeta": 1, "alpha": 2}')
    assert not admits(compiler, schema, '{"alpha": 2, "zeta": 1}')
