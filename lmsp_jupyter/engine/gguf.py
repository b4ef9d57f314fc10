"""A small, fast reader for the metadata header of GGUF model files.

Only the header and the key/value section are read: scalar and string values are kept, arrays
(such as the ~260k-entry tokenizer vocabulary) are skipped without decoding, and tensor data is
never touched. Nothing here depends on llama.cpp.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO, TypeAlias, TypeVar

__all__ = [
    "GGUF_MAGIC",
    "GgufError",
    "GgufMetadata",
    "GgufSource",
    "Scalar",
    "quantization_name",
    "read_gguf_metadata",
]

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)

#: A metadata value the reader keeps.
Scalar: TypeAlias = int | float | bool | str
#: What :func:`read_gguf_metadata` accepts: a path, an open binary file, or the paths of the
#: pieces of a file split into consecutive chunks.
GgufSource: TypeAlias = str | os.PathLike[str] | BinaryIO | Sequence[str | os.PathLike[str]]

_T = TypeVar("_T")

_READ_CHUNK = 1 << 20
_DEFAULT_ALIGNMENT = 32
_MAX_KEY_BYTES = 0xFFFF
_MAX_ARRAY_NESTING = 8

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<4sIQQ")

_TYPE_STRING = 8
_TYPE_ARRAY = 9
#: Fixed-size value types: GGUF type id -> struct reading one value.
_FIXED_TYPES: dict[int, struct.Struct] = {
    0: struct.Struct("<B"),
    1: struct.Struct("<b"),
    2: struct.Struct("<H"),
    3: struct.Struct("<h"),
    4: struct.Struct("<I"),
    5: struct.Struct("<i"),
    6: struct.Struct("<f"),
    7: struct.Struct("<?"),
    10: struct.Struct("<Q"),
    11: struct.Struct("<q"),
    12: struct.Struct("<d"),
}

#: ``general.file_type`` (llama.cpp's ``llama_ftype``) -> quantization name.
_FILE_TYPE_NAMES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
}


class GgufError(ValueError):
    """The data is not a readable GGUF file (wrong magic, unsupported version, corrupt, cut)."""


def quantization_name(file_type: int | None) -> str | None:
    """The quantization name (``"Q4_K_M"``) of a ``general.file_type`` value, if known."""
    if file_type is None:
        return None
    return _FILE_TYPE_NAMES.get(file_type)


@dataclass(frozen=True)
class GgufMetadata:
    """What a GGUF file's header says about the model it holds."""

    version: int
    tensor_count: int
    architecture: str
    name: str | None
    context_length: int | None
    chat_template: str | None
    file_type: int | None
    values: Mapping[str, Scalar] = field(hash=False, repr=False)
    #: Bytes of tensor data (the weights), or ``None`` when the tensor table cannot be read.
    tensor_bytes: int | None = None
    #: The GGML type id of the output layer's weights (``output.weight``, or the token
    #: embeddings a tied output layer reads), ``None`` when the tensor table does not say.
    output_type: int | None = None

    @property
    def quantization(self) -> str | None:
        """The quantization name derived from ``general.file_type`` (``None`` if unknown)."""
        return quantization_name(self.file_type)


def read_gguf_metadata(source: GgufSource) -> GgufMetadata:
    """Read the metadata of a GGUF file.

    ``source`` is a path, a binary file object (read from its current position, left open), or
    a sequence of paths whose contents concatenate to the file (a model shipped in chunks).
    Only the header is read. Raises :class:`GgufError` when the data is not a valid GGUF v2/v3
    header and :class:`OSError` when a file cannot be opened.
    """
    if isinstance(source, (str, os.PathLike)):
        return _read_paths([Path(source)])
    if isinstance(source, Sequence):
        return _read_paths([Path(p) for p in source])
    return _parse(_Stream([source]))


def _read_paths(paths: Sequence[Path]) -> GgufMetadata:
    if not paths:
        raise GgufError("no GGUF file given")
    files: list[BinaryIO] = []
    try:
        for path in paths:
            files.append(open(path, "rb"))  # noqa: SIM115 - closed below
        try:
            return _parse(_Stream(files))
        except GgufError as exc:
            raise GgufError(f"{paths[0]}: {exc}") from None
    finally:
        for file in files:
            file.close()


class _Stream:
    """One or more open files read as a single run of bytes."""

    def __init__(self, files: Sequence[BinaryIO]) -> None:
        self._parts: list[tuple[BinaryIO, int, int]] = []  # (file, start in file, length)
        for file in files:
            start = file.tell()
            end = file.seek(0, os.SEEK_END)
            self._parts.append((file, start, max(end - start, 0)))
        self.size = sum(length for _, _, length in self._parts)

    def read_at(self, offset: int, count: int) -> bytes:
        """Up to ``count`` bytes starting ``offset`` bytes into the stream."""
        pieces: list[bytes] = []
        for file, start, length in self._parts:
            if count <= 0:
                break
            if offset >= length:
                offset -= length
                continue
            file.seek(start + offset)
            piece = file.read(min(count, length - offset))
            pieces.append(piece)
            count -= len(piece)
            offset = 0
        return b"".join(pieces)


class _Reader:
    """Sequential reads over a :class:`_Stream` through a large buffer."""

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream
        self._buf = b""
        self._buf_start = 0  # stream offset of _buf[0]
        self._pos = 0  # read position, relative to _buf_start (may lie past the buffer)

    @property
    def offset(self) -> int:
        """The current offset in the stream."""
        return self._buf_start + self._pos

    def _require(self, count: int) -> int:
        """Make ``count`` bytes available at the read position; return that position in _buf."""
        if self._pos + count <= len(self._buf):
            return self._pos
        offset = self.offset
        if offset + count > self._stream.size:
            raise GgufError(f"truncated: needed {count} bytes at offset {offset}")
        self._buf = self._stream.read_at(offset, max(count, _READ_CHUNK))
        self._buf_start, self._pos = offset, 0
        if len(self._buf) < count:
            raise GgufError(f"truncated: needed {count} bytes at offset {offset}")
        return 0

    def unpack(self, st: struct.Struct) -> tuple[Any, ...]:
        """Read one struct."""
        pos = self._require(st.size)
        self._pos = pos + st.size
        return st.unpack_from(self._buf, pos)

    def u32(self) -> int:
        """Read a little-endian uint32."""
        return int(self.unpack(_U32)[0])

    def u64(self) -> int:
        """Read a little-endian uint64."""
        return int(self.unpack(_U64)[0])

    def string(self, what: str, limit: int | None = None) -> str:
        """Read a GGUF string (uint64 length, UTF-8 bytes)."""
        length = self.u64()
        if limit is not None and length > limit:
            raise GgufError(f"corrupt: {what} is {length} bytes long")
        pos = self._require(length)
        self._pos = pos + length
        try:
            return self._buf[pos : pos + length].decode("utf-8")
        except UnicodeDecodeError:
            raise GgufError(
                f"corrupt: {what} at offset {self._buf_start + pos} is not UTF-8"
            ) from None

    def skip(self, count: int) -> None:
        """Move the read position ``count`` bytes forward."""
        self._pos += count
        self._check_in_bounds()

    def skip_strings(self, count: int) -> None:
        """Move past ``count`` consecutive GGUF strings without decoding them."""
        unpack_from = _U64.unpack_from
        buf, pos, end = self._buf, self._pos, len(self._buf)
        while count:
            if pos + 8 > end:
                self._pos = pos
                self._check_in_bounds()
                pos = self._require(8)
                buf, end = self._buf, len(self._buf)
            pos += 8 + unpack_from(buf, pos)[0]
            count -= 1
        self._pos = pos
        self._check_in_bounds()

    def _check_in_bounds(self) -> None:
        if self.offset > self._stream.size:
            raise GgufError(f"truncated: data runs past the end ({self._stream.size} bytes)")


def _parse(stream: _Stream) -> GgufMetadata:
    reader = _Reader(stream)
    version, tensor_count, kv_count = _read_header(reader)
    values: dict[str, Scalar] = {}
    for _ in range(kv_count):
        key = reader.string("a key", _MAX_KEY_BYTES)
        value = _read_value(reader, reader.u32(), key)
        if value is not None:
            values[key] = value
    metadata = _metadata(version, tensor_count, values)
    try:
        types = _tensor_types(reader, tensor_count)
    except GgufError:
        return metadata
    alignment = _typed(values, "general.alignment", int) or _DEFAULT_ALIGNMENT
    start = -(-reader.offset // alignment) * alignment
    output_type = types.get(_OUTPUT_TENSOR, types.get(_EMBEDDING_TENSOR))
    return replace(metadata, tensor_bytes=max(stream.size - start, 0), output_type=output_type)


_OUTPUT_TENSOR, _EMBEDDING_TENSOR = "output.weight", "token_embd.weight"


def _tensor_types(reader: _Reader, tensor_count: int) -> dict[str, int]:
    """Read the tensor table: the types of the output layer's candidate tensors, by name."""
    types: dict[str, int] = {}
    for _ in range(tensor_count):
        name = reader.string("a tensor name", _MAX_KEY_BYTES)
        reader.skip(8 * reader.u32())  # the dimensions
        (tensor_type,) = reader.unpack(_U32)
        reader.skip(8)  # the offset
        if name in (_OUTPUT_TENSOR, _EMBEDDING_TENSOR):
            types[name] = tensor_type
    return types


def _read_header(reader: _Reader) -> tuple[int, int, int]:
    try:
        magic, version, tensor_count, kv_count = reader.unpack(_HEADER)
    except GgufError:
        raise GgufError("not a GGUF file: too short for a GGUF header") from None
    if magic != GGUF_MAGIC:
        raise GgufError(f"not a GGUF file: magic is {magic!r}, expected {GGUF_MAGIC!r}")
    if version not in SUPPORTED_VERSIONS:
        raise GgufError(f"unsupported GGUF version {version} (supported: 2, 3)")
    return version, tensor_count, kv_count


def _read_value(reader: _Reader, value_type: int, key: str) -> Scalar | None:
    """Read one value; arrays are skipped and give ``None``."""
    fixed = _FIXED_TYPES.get(value_type)
    if fixed is not None:
        value: Scalar = reader.unpack(fixed)[0]
        return value
    if value_type == _TYPE_STRING:
        return reader.string(f"the value of {key!r}")
    if value_type == _TYPE_ARRAY:
        _skip_array(reader, key, depth=0)
        return None
    raise GgufError(f"corrupt: unknown value type {value_type} for key {key!r}")


def _skip_array(reader: _Reader, key: str, depth: int) -> None:
    if depth >= _MAX_ARRAY_NESTING:
        raise GgufError(f"corrupt: arrays nested too deeply in {key!r}")
    element_type = reader.u32()
    count = reader.u64()
    fixed = _FIXED_TYPES.get(element_type)
    if fixed is not None:
        reader.skip(count * fixed.size)
    elif element_type == _TYPE_STRING:
        reader.skip_strings(count)
    elif element_type == _TYPE_ARRAY:
        for _ in range(count):
            _skip_array(reader, key, depth + 1)
    else:
        raise GgufError(f"corrupt: unknown array element type {element_type} for key {key!r}")


def _metadata(version: int, tensor_count: int, values: dict[str, Scalar]) -> GgufMetadata:
    architecture = values.get("general.architecture")
    if not isinstance(architecture, str) or not architecture:
        raise GgufError("invalid GGUF metadata: general.architecture is missing")
    return GgufMetadata(
        version=version,
        tensor_count=tensor_count,
        architecture=architecture,
        name=_typed(values, "general.name", str),
        context_length=_typed(values, f"{architecture}.context_length", int),
        chat_template=_typed(values, "tokenizer.chat_template", str),
        file_type=_typed(values, "general.file_type", int),
        values=MappingProxyType(values),
    )


def _typed(values: Mapping[str, Scalar], key: str, kind: type[_T]) -> _T | None:
    value = values.get(key)
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    return None
