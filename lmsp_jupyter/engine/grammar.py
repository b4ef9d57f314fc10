"""JSON Schema → llama.cpp grammar, for the schemas the decoder can enforce exactly."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator, SchemaError
from llama_cpp.llama_grammar import json_schema_to_gbnf

from .generation import GrammarError

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 16

#: Keywords the grammar enforces, and annotations that constrain nothing.
_ENFORCED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
        "minLength",
        "maxLength",
        "pattern",
        "format",
    }
)
_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_FORMATS = frozenset({"date", "time", "date-time", "uuid"})


def check_enforceable(schema: Any, depth: int = 0) -> None:
    """Refuse (``GrammarError``) a schema the grammar cannot enforce exactly, or too big a one."""
    if depth == 0:
        if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
            raise GrammarError(f"the schema is over {MAX_SCHEMA_BYTES} bytes")
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise GrammarError(f"not a valid JSON Schema: {exc.message}") from None
    if depth > MAX_SCHEMA_DEPTH:
        raise GrammarError(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise GrammarError("a schema must be an object")
    unknown = set(schema) - _ENFORCED - _ANNOTATIONS
    if unknown:
        raise GrammarError(f"the decoder cannot enforce {sorted(unknown)}")
    if "format" in schema and schema["format"] not in _FORMATS:
        raise GrammarError(f"the decoder cannot enforce format {schema['format']!r}")
    if isinstance(schema.get("items"), list):
        raise GrammarError("'items' must be one schema; use 'prefixItems' for tuples")
    ref = schema.get("$ref")
    if ref is not None and not str(ref).startswith(("#/$defs/", "#/definitions/")):
        raise GrammarError(f"only local references are supported, not {ref!r}")
    for child in _children(schema):
        check_enforceable(child, depth + 1)


def _children(schema: dict[str, Any]) -> list[Any]:
    children: list[Any] = []
    for key in ("properties", "$defs", "definitions"):
        children += list(schema.get(key, {}).values())
    for key in ("anyOf", "prefixItems"):
        children += list(schema.get(key, []))
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            children.append(schema[key])
    return children


def json_schema_grammar(schema: dict[str, Any], property_order: list[str] | None = None) -> str:
    """The GBNF grammar of the JSON texts that validate against an enforceable ``schema``."""
    check_enforceable(schema)
    try:
        grammar: str = json_schema_to_gbnf(json.dumps(schema), property_order)
    except (ValueError, TypeError, AssertionError, KeyError, RecursionError) as exc:
        raise GrammarError(f"the schema cannot be turned into a grammar: {exc}") from None
    return grammar
