"""JSON Schema constraints, enforced token by token with llguidance over a model's vocabulary.

A schema is checked once without a vocabulary (``check_schema``: limits, JSON Schema validity,
and whether llguidance can compile it), then compiled per model vocabulary by a
``SchemaCompiler`` (cached by schema), which hands each sequence its own ``SchemaMatcher``.

llguidance's JSON grammar never lets a raw control character into a string (they must be
escaped), enforces numeric bounds (and sets some where a schema sets none: ``_bounded``),
``multipleOf``, formats, ``anyOf``/``allOf``, ``oneOf`` whose branches cannot overlap and
recursive references. What it cannot compile is refused up front.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from functools import lru_cache
from re import _parser as sre_parse  # type: ignore[attr-defined,unused-ignore]  # reads a pattern's structure
from typing import TYPE_CHECKING, Any

import numpy as np
from jsonschema import Draft202012Validator, SchemaError
from llguidance import LLMatcher, LLTokenizer
from numpy.typing import NDArray

from .generation import EngineError, GrammarError

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 16
#: Nesting of JSON containers anywhere in a schema (``const``, ``enum`` and ``default`` included).
MAX_JSON_DEPTH = 64

#: Lengths and counts a schema or pattern may ask for; more cannot fit any context window and
#: would make the decoder's automata (and the validators) build huge states.
MAX_SCHEMA_COUNT = 10_000
_COUNTS = (
    *("minLength", "maxLength", "minItems", "maxItems"),
    *("minProperties", "maxProperties", "minContains", "maxContains"),
)
#: A ``minLength`` beside a ``pattern``: the decoder intersects them into one automaton, which
#: grows with the length (at 4,000 llguidance gives up mid-answer).
MAX_PATTERN_MIN_LENGTH = 1_000
_REPEATS = (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, sre_parse.POSSESSIVE_REPEAT)

#: Bounds the decoder sets on numbers whose schema sets none: JSON's interoperable integers
#: (RFC 8259, section 6: ±(2**53 − 1), at most 16 digits) and at most 10 decimals. Without
#: them a small greedy model may write digits until its token budget runs out.
NUMBER_LIMIT = 2**53 - 1
NUMBER_STEP = 1e-10

#: Compact JSON with a space after separators: no whitespace for a small model to loop in.
_OPTIONS: JsonCompileOptions = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}

#: Keywords whose value is one subschema, a list of them, or a name → subschema mapping.
_ONE = (
    *("items", "additionalProperties", "not", "if", "then", "else", "contains"),
    *("propertyNames", "unevaluatedItems", "unevaluatedProperties", "additionalItems"),
)
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def check_schema(schema: Any) -> None:
    """Refuse (``GrammarError``) a schema too big or deep, invalid, or one llguidance cannot
    enforce; needs no model, so requests are refused before any work."""
    schema_grammar(_canonical(schema))


def _canonical(schema: Any) -> str:
    _check_depth(schema)
    text = json.dumps(schema, ensure_ascii=False)
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise GrammarError(f"the schema is over {MAX_SCHEMA_BYTES} bytes")
    return text


@lru_cache(maxsize=256)
def schema_grammar(canonical: str) -> str:
    """The llguidance grammar of the schema whose canonical JSON text is ``canonical``."""
    schema = json.loads(canonical)
    if not isinstance(schema, dict | bool):
        raise GrammarError("a schema must be an object or a boolean")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise GrammarError(f"not a valid JSON Schema: {exc.message}") from None
    grammar = LLMatcher.grammar_from_json_schema(_for_decoding(schema), overrides=_OPTIONS)
    error = LLMatcher.validate_grammar(grammar)
    if error:
        raise GrammarError(f"the decoder cannot enforce this schema: {error.splitlines()[0]}")
    return grammar


def _check_depth(schema: Any) -> None:
    """Nesting limits, checked without recursion so no document can exhaust the stack."""
    stack: list[tuple[Any, int]] = [(schema, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise GrammarError(f"the schema nests deeper than {MAX_JSON_DEPTH} JSON levels")
        if isinstance(value, dict):
            stack += [(child, depth + 1) for child in value.values()]
        elif isinstance(value, list):
            stack += [(child, depth + 1) for child in value]
    schemas: list[tuple[Any, int]] = [(schema, 0)]
    while schemas:
        value, depth = schemas.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise GrammarError(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        _check_sizes(value)
        schemas += [(child, depth + 1) for child in _subschemas(value)]


def _check_sizes(schema: Any) -> None:
    """One schema's counts and patterns, before anything compiles them."""
    if not isinstance(schema, dict):
        return
    for key in _COUNTS:
        count = schema.get(key, 0)
        if (
            not isinstance(count, bool)
            and isinstance(count, int | float)
            and count > MAX_SCHEMA_COUNT
        ):
            raise GrammarError(f"{key} is over {MAX_SCHEMA_COUNT}")
    least = schema.get("minLength", 0)
    if "pattern" in schema and isinstance(least, int | float) and least > MAX_PATTERN_MIN_LENGTH:
        raise GrammarError(f"minLength beside a pattern is over {MAX_PATTERN_MIN_LENGTH}")
    patterns = [schema.get("pattern")]
    if isinstance(schema.get("patternProperties"), dict):
        patterns += list(schema["patternProperties"])
    for pattern in patterns:
        if isinstance(pattern, str):
            _check_pattern(pattern)


def _check_pattern(pattern: str) -> None:
    """Refuse patterns that make a backtracking engine (the validators') take exponential
    time or that spell out huge repetitions: a variable repetition inside another, or around
    an alternation (``(a+)+``, ``(a|aa)*``), and repeat counts over ``MAX_SCHEMA_COUNT``.
    Patterns ``re`` cannot read are left to the decoder's own checks."""
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return
    nodes: list[tuple[Any, int, bool]] = [(parsed, 1, False)]
    while nodes:
        items, spelled, in_variable = nodes.pop()
        for op, argument in items:
            if op in _REPEATS:
                low, high, body = argument
                count = spelled * (low if high == sre_parse.MAXREPEAT else high)
                if count > MAX_SCHEMA_COUNT:
                    raise GrammarError(f"pattern {pattern!r} repeats over {MAX_SCHEMA_COUNT}")
                variable = low != high
                if variable and in_variable:
                    raise GrammarError(f"pattern {pattern!r} nests variable repetitions")
                nodes.append((body, max(count, 1), in_variable or variable))
            elif op is sre_parse.BRANCH:
                if in_variable:
                    raise GrammarError(f"pattern {pattern!r} repeats an alternation")
                nodes += [(branch, spelled, in_variable) for branch in argument[1]]
            elif op is sre_parse.SUBPATTERN:
                nodes.append((argument[-1], spelled, in_variable))
            elif op is sre_parse.ATOMIC_GROUP:
                nodes.append((argument, spelled, in_variable))
            elif op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT):
                nodes.append((argument[1], spelled, in_variable))


def _subschemas(schema: Any) -> list[Any]:
    if not isinstance(schema, dict):
        return []
    children = [schema[key] for key in _ONE if isinstance(schema.get(key), dict)]
    for key in _MANY:
        if isinstance(schema.get(key), list):
            children += schema[key]
    for key in _NAMED:
        if isinstance(schema.get(key), dict):
            children += list(schema[key].values())
    return children


def _for_decoding(schema: Any, *, in_all_of: bool = False) -> Any:
    """``schema`` as the decoder enforces it: an object that lists its ``properties`` gets no
    others unless it says so (a small model would otherwise add keys until it runs out of
    tokens; the output still validates), except where properties combine (``allOf`` branches,
    ``$ref`` or ``*Of`` beside them); ``uniqueItems: false``, which constrains nothing but
    which llguidance refuses as an unknown keyword, is dropped; numbers get the bounds the
    schema leaves open (``_bounded``)."""
    if not isinstance(schema, dict):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "uniqueItems" and value is False:
            continue
        if key in _NAMED and isinstance(value, dict):
            value = {name: _for_decoding(child) for name, child in value.items()}
        elif key in _MANY and isinstance(value, list):
            value = [_for_decoding(child, in_all_of=key == "allOf") for child in value]
        elif key in _ONE:
            value = _for_decoding(value)
        result[key] = value
    combined = {"$ref", "allOf", "anyOf", "oneOf"}
    closed = {"additionalProperties", "patternProperties", "unevaluatedProperties"}
    if "properties" in result and not in_all_of and not (combined | closed) & set(result):
        result["additionalProperties"] = False
    return _bounded(result)


def _bounded(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``NUMBER_LIMIT`` on each side of a number's range it leaves open
    (where that range stays non-empty) and, for ``number`` without ``multipleOf``, at most 10
    decimals; what the schema sets itself stays exactly as it is. Every value allowed is still
    valid for the schema."""
    kinds = schema.get("type")
    types = {kinds} if isinstance(kinds, str) else set(kinds) if isinstance(kinds, list) else set()
    if not types & {"integer", "number"} or "enum" in schema or "const" in schema:
        return schema
    low = _bound(schema, "minimum", "exclusiveMinimum")
    high = _bound(schema, "maximum", "exclusiveMaximum")
    bounded = dict(schema)
    if low is None and (high is None or high >= -NUMBER_LIMIT):
        bounded["minimum"] = -NUMBER_LIMIT
    if high is None and (low is None or low <= NUMBER_LIMIT):
        bounded["maximum"] = NUMBER_LIMIT
    if "number" in types and "multipleOf" not in schema:
        bounded["multipleOf"] = NUMBER_STEP
    return bounded


def _bound(schema: dict[str, Any], *keys: str) -> float | None:
    """A bound among ``keys`` that the schema sets, if any."""
    for key in keys:
        value = schema.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    return None


class SchemaCompiler:
    """Schemas compiled against one model's vocabulary, cached by schema; thread-safe.

    Building the llguidance tokenizer takes about a second, so make one per vocabulary.
    """

    def __init__(self, tokenizer: LLTokenizer, cache_size: int = 64) -> None:
        self.tokenizer = tokenizer
        self._cache: OrderedDict[str, LLMatcher] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def matcher(self, schema: Any) -> SchemaMatcher:
        """A fresh matcher of ``schema`` for one sequence; ``GrammarError`` if it cannot be
        enforced."""
        canonical = _canonical(schema)
        with self._lock:
            compiled = self._cache.get(canonical)
            if compiled is not None:
                self._cache.move_to_end(canonical)
                return SchemaMatcher(compiled.deep_copy(), self.tokenizer)
        compiled = LLMatcher(self.tokenizer, schema_grammar(canonical), log_level=0)
        # A grammar that compiles may still admit no text at all (a $ref to itself, a cycle
        # of references): its first mask fails. Found here, it is a 400, not a failed answer.
        probe = compiled.deep_copy()
        probe.compute_bitmask()
        for matcher in (compiled, probe):
            if matcher.is_error():
                error = matcher.get_error().splitlines()[0]
                raise GrammarError(f"the decoder cannot enforce this schema: {error}")
        with self._lock:
            self._cache[canonical] = compiled
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return SchemaMatcher(compiled.deep_copy(), self.tokenizer)


class SchemaMatcher:
    """Where one sequence stands in its schema: which tokens may come next.

    Meant for lazy checking: sample from the model's logits, keep the token if ``allows`` it,
    and only otherwise ``mask_logits`` and sample again (the same token at temperature 0).
    Every token appended to the sequence, forced ones included, goes through ``accept``.
    """

    def __init__(self, matcher: LLMatcher, tokenizer: LLTokenizer) -> None:
        self._matcher = matcher
        self._vocab_size = tokenizer.vocab_size
        self._ends = frozenset(tokenizer.eos_tokens)

    def allows(self, token: int) -> bool:
        """Whether ``token`` may come next (an end-of-generation token once the JSON is whole)."""
        if self._matcher.is_stopped():
            return token in self._ends and not self._matcher.is_error()
        return 0 <= token < self._vocab_size and self._matcher.validate_tokens([token]) == 1

    def mask_logits(self, logits: NDArray[np.float32]) -> None:
        """Set the logits of every token that may not come next to -inf, in place."""
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(bits, bitorder="little").view(np.bool_)
        size = min(len(logits), self._vocab_size)
        logits[:size][~allowed[:size]] = -np.inf
        logits[size:] = -np.inf
        self._raise_on_error()

    def accept(self, token: int) -> None:
        """Advance past ``token``, which must be allowed."""
        if not self._matcher.consume_token(token):
            self._raise_on_error()
            raise EngineError(f"token {token} breaks the schema")

    def forced(self) -> list[int]:
        """Tokens the schema forces now, to append without sampling (each then ``accept``-ed)."""
        return self._matcher.compute_ff_tokens()

    def finished(self) -> bool:
        """Whether the JSON is whole and nothing more may follow it."""
        return self._matcher.is_stopped() and not self._matcher.is_error()

    def _raise_on_error(self) -> None:
        if self._matcher.is_error():
            error = self._matcher.get_error().splitlines()[0]
            raise EngineError(f"constrained decoding failed: {error}")
