"""Writes small but valid GGUF v3 files for tests (header and key/values, no tensor data), and
copies of a real one with metadata added."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# GGUF value type ids.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY = range(10)
UINT64, INT64, FLOAT64 = 10, 11, 12

_FORMATS = {
    UINT8: "<B",
    INT8: "<b",
    UINT16: "<H",
    INT16: "<h",
    UINT32: "<I",
    INT32: "<i",
    FLOAT32: "<f",
    BOOL: "<?",
    UINT64: "<Q",
    INT64: "<q",
    FLOAT64: "<d",
}

DEFAULT_VOCAB_SIZE = 1000


@dataclass(frozen=True)
class Typed:
    """A value written with an explicit GGUF type (``Typed(UINT64, 5)``)."""

    type: int
    value: object


@dataclass(frozen=True)
class Array:
    """An array value with an explicit element type."""

    element_type: int
    items: Sequence[object]


def tokens(count: int) -> list[str]:
    """A made-up vocabulary of ``count`` distinct tokens of varying length."""
    return [f"tok{i}" + "x" * (i % 13) for i in range(count)]


def write_gguf(
    path: Path,
    metadata: Mapping[str, object],
    tensor_count: int = 0,
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    padding: int = 0,
) -> Path:
    """Write a GGUF v3 file holding ``metadata`` and return its path (see :func:`gguf_bytes`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gguf_bytes(metadata, tensor_count, vocab_size=vocab_size, padding=padding))
    return path


def gguf_bytes(
    metadata: Mapping[str, object],
    tensor_count: int = 0,
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    padding: int = 0,
) -> bytes:
    """The bytes of a GGUF v3 file holding ``metadata``.

    Unless ``metadata`` has them, tokenizer arrays are added (``tokenizer.ggml.tokens`` with
    ``vocab_size`` strings, plus scores and token types) so readers must skip large arrays.
    ``padding`` zero bytes stand in for tensor data. Python values map to GGUF types: ``str`` ->
    string, ``bool`` -> bool, ``int`` -> uint32 (int64 if out of range), ``float`` -> float32,
    ``list`` -> array of the first element's type; use :class:`Typed` / :class:`Array` to choose.
    """
    values: dict[str, object] = dict(metadata)
    if vocab_size and "tokenizer.ggml.tokens" not in values:
        values["tokenizer.ggml.tokens"] = tokens(vocab_size)
        values["tokenizer.ggml.scores"] = Array(FLOAT32, [0.0] * vocab_size)
        values["tokenizer.ggml.token_type"] = Array(INT32, [1] * vocab_size)
    parts = [b"GGUF", struct.pack("<IQQ", 3, tensor_count, len(values))]
    for key, value in values.items():
        parts.append(_string(key))
        parts.append(_value(value))
    parts.append(bytes(padding))
    return b"".join(parts)


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def _value(value: object) -> bytes:
    value_type = _type_of(value)
    return struct.pack("<I", value_type) + _payload(value_type, value)


def _type_of(value: object) -> int:
    if isinstance(value, Typed):
        return value.type
    if isinstance(value, (Array, list)):
        return ARRAY
    if isinstance(value, str):
        return STRING
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return UINT32 if 0 <= value < 2**32 else INT64
    if isinstance(value, float):
        return FLOAT32
    raise TypeError(f"no GGUF type for {value!r}")


def _payload(value_type: int, value: object) -> bytes:
    if isinstance(value, Typed):
        value = value.value
    if value_type == STRING:
        assert isinstance(value, str)
        return _string(value)
    if value_type == ARRAY:
        array = value if isinstance(value, Array) else _infer_array(value)
        return _array(array)
    return struct.pack(_FORMATS[value_type], value)


def _infer_array(value: object) -> Array:
    assert isinstance(value, list)
    assert value, "give empty arrays as Array(type, [])"
    return Array(_type_of(value[0]), value)


def _array(array: Array) -> bytes:
    header = struct.pack("<IQ", array.element_type, len(array.items))
    if array.element_type == STRING:
        return header + b"".join(_string(str(item)) for item in array.items)
    if array.element_type == ARRAY:
        nested = (item if isinstance(item, Array) else _infer_array(item) for item in array.items)
        return header + b"".join(_array(item) for item in nested)
    fmt = _FORMATS[array.element_type]
    return header + struct.pack(f"<{len(array.items)}{fmt[1:]}", *array.items)


def with_metadata(source: Path, target: Path, extra: Mapping[str, object]) -> Path:
    """A copy of the real GGUF ``source`` at ``target`` with the keys of ``extra`` added to its
    metadata (its tensors unchanged, the data realigned): a model llama.cpp loads as it loads
    ``source``, but for what ``extra`` says."""
    with source.open("rb") as file:
        head = file.read(24)
        magic, version, tensor_count, kv_count = struct.unpack("<4sIQQ", head)
        assert magic == b"GGUF", source
        alignment = 32
        for _ in range(kv_count):
            key = _read_string(file)
            value_type = struct.unpack("<I", file.read(4))[0]
            if key == "general.alignment":
                alignment = struct.unpack(_FORMATS[value_type], file.read(4))[0]
            else:
                _skip_value(file, value_type)
        kv_end = file.tell()
        for _ in range(tensor_count):
            _read_string(file)
            dimensions = struct.unpack("<I", file.read(4))[0]
            file.seek(8 * dimensions + 4 + 8, 1)
        table_end = file.tell()
        data_start = -(-table_end // alignment) * alignment
        file.seek(24)
        metadata = file.read(kv_end - 24)
        table = file.read(table_end - kv_end)
        added = b"".join(_string(key) + _value(value) for key, value in extra.items())
        new_head = struct.pack("<4sIQQ", magic, version, tensor_count, kv_count + len(extra))
        out = new_head + metadata + added + table
        out += bytes(-len(out) % alignment)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("wb") as copy:
            copy.write(out)
            file.seek(data_start)
            shutil.copyfileobj(file, copy, 1 << 22)
    return target


def _read_string(file: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", file.read(8))
    return file.read(length).decode()


def _skip_value(file: BinaryIO, value_type: int) -> None:
    if value_type == STRING:
        _read_string(file)
    elif value_type == ARRAY:
        element_type, count = struct.unpack("<IQ", file.read(12))
        if element_type in _FORMATS:
            file.seek(count * struct.calcsize(_FORMATS[element_type]), 1)
        else:
            for _ in range(count):
                _skip_value(file, element_type)
    else:
        file.seek(struct.calcsize(_FORMATS[value_type]), 1)
