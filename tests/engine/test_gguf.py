"""Tests for the GGUF metadata reader."""

from __future__ import annotations

import io
import itertools
import struct
from pathlib import Path

import pytest

from lmsp_jupyter.engine.gguf import GgufError, quantization_name, read_gguf_metadata
from tests.engine.gguf_files import (
    BOOL,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    UINT8,
    UINT16,
    UINT32,
    UINT64,
    Array,
    Typed,
    gguf_bytes,
    write_gguf,
)

TEMPLATE = "{% for m in messages %}<start_of_turn>{{ m.content }}<end_of_turn>{% endfor %}"
LLAMA = {
    "general.architecture": "llama",
    "general.name": "Tiny Llama",
    "general.file_type": 15,
    "llama.context_length": 8192,
    "tokenizer.chat_template": TEMPLATE,
}


def test_reads_architecture_name_context_length_chat_template_and_file_type(
    tmp_path: Path,
) -> None:
    metadata = read_gguf_metadata(write_gguf(tmp_path / "m.gguf", LLAMA, tensor_count=7))

    assert metadata.version == 3
    assert metadata.tensor_count == 7
    assert metadata.architecture == "llama"
    assert metadata.name == "Tiny Llama"
    assert metadata.context_length == 8192
    assert metadata.chat_template == TEMPLATE
    assert metadata.file_type == 15
    assert metadata.quantization == "Q4_K_M"


def test_context_length_is_read_under_the_architecture_prefix(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "m.gguf",
        {
            "general.architecture": "gemma3",
            "llama.context_length": 4096,
            "gemma3.context_length": 32768,
        },
    )

    assert read_gguf_metadata(path).context_length == 32768


def test_optional_fields_are_none_when_missing(tmp_path: Path) -> None:
    metadata = read_gguf_metadata(
        write_gguf(tmp_path / "m.gguf", {"general.architecture": "qwen3"})
    )

    assert metadata.name is None
    assert metadata.context_length is None
    assert metadata.chat_template is None
    assert metadata.file_type is None
    assert metadata.quantization is None


def test_keeps_every_scalar_type_with_its_value(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "m.gguf",
        {
            "general.architecture": "llama",
            "t.u8": Typed(UINT8, 255),
            "t.i8": Typed(INT8, -128),
            "t.u16": Typed(UINT16, 65535),
            "t.i16": Typed(INT16, -32768),
            "t.u32": Typed(UINT32, 4_000_000_000),
            "t.i32": Typed(INT32, -2_000_000_000),
            "t.f32": Typed(FLOAT32, -2.25),
            "t.bool": Typed(BOOL, True),
            "t.string": Typed(STRING, "héllo ✓"),
            "t.u64": Typed(UINT64, 2**64 - 1),
            "t.i64": Typed(INT64, -(2**63)),
            "t.f64": Typed(FLOAT64, 0.1),
        },
    )

    values = read_gguf_metadata(path).values

    assert {k: v for k, v in values.items() if k.startswith("t.")} == {
        "t.u8": 255,
        "t.i8": -128,
        "t.u16": 65535,
        "t.i16": -32768,
        "t.u32": 4_000_000_000,
        "t.i32": -2_000_000_000,
        "t.f32": -2.25,
        "t.bool": True,
        "t.string": "héllo ✓",
        "t.u64": 2**64 - 1,
        "t.i64": -(2**63),
        "t.f64": 0.1,
    }
    assert values["t.bool"] is True


def test_arrays_are_skipped_and_later_values_still_read(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "m.gguf",
        {
            "general.architecture": "llama",
            "a.u8": Array(UINT8, [1, 2, 3]),
            "a.f64": Array(FLOAT64, [1.5] * 10),
            "a.strings": ["x", "yy", ""],
            "a.empty": Array(STRING, []),
            "after": "still here",
        },
    )

    values = read_gguf_metadata(path).values

    assert dict(values) == {"general.architecture": "llama", "after": "still here"}


def test_nested_arrays_are_skipped(tmp_path: Path) -> None:
    nested = Array(9, [Array(STRING, ["a", "bc"]), Array(INT32, [1, 2, 3]), Array(9, [])])
    path = write_gguf(
        tmp_path / "m.gguf",
        {"general.architecture": "llama", "nested": nested, "after": 42},
        vocab_size=0,
    )

    assert dict(read_gguf_metadata(path).values) == {"general.architecture": "llama", "after": 42}


def test_a_vocabulary_larger_than_the_read_buffer_is_skipped(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "m.gguf",
        {**LLAMA, "tokenizer.ggml.tokens_after": "end"},
        vocab_size=262_144,
    )
    assert path.stat().st_size > 4 * (1 << 20)

    metadata = read_gguf_metadata(path)

    assert metadata.values["tokenizer.ggml.tokens_after"] == "end"
    assert metadata.chat_template == TEMPLATE


def test_version_2_files_are_read() -> None:
    data = bytearray(gguf_bytes({"general.architecture": "llama"}))
    data[4:8] = struct.pack("<I", 2)

    assert read_gguf_metadata(io.BytesIO(bytes(data))).version == 2


def test_reads_a_file_object_from_its_current_position() -> None:
    stream = io.BytesIO(b"junk" + gguf_bytes(LLAMA))
    stream.seek(4)

    assert read_gguf_metadata(stream).architecture == "llama"
    assert not stream.closed


def test_reads_a_file_split_into_chunks(tmp_path: Path) -> None:
    data = gguf_bytes(LLAMA, vocab_size=100_000, padding=1000)
    cuts = [0, 3, 200_000, 700_000, len(data)]  # inside the magic and inside the vocabulary
    chunks = []
    for i, (start, end) in enumerate(itertools.pairwise(cuts)):
        chunk = tmp_path / f"model.gguf.part{i}"
        chunk.write_bytes(data[start:end])
        chunks.append(chunk)

    metadata = read_gguf_metadata(chunks)

    assert (metadata.architecture, metadata.context_length) == ("llama", 8192)


def test_reads_a_header_lying_wholly_in_the_first_chunk(tmp_path: Path) -> None:
    first, second = tmp_path / "part0", tmp_path / "part1"
    first.write_bytes(gguf_bytes(LLAMA, padding=10_000))
    second.write_bytes(bytes(10_000))

    assert read_gguf_metadata([first, second]).name == "Tiny Llama"


def test_accepts_a_string_path(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", LLAMA)

    assert read_gguf_metadata(str(path)).architecture == "llama"


def test_quantization_names_follow_llama_cpp_file_types() -> None:
    assert [quantization_name(t) for t in (0, 1, 2, 7, 15, 18, 32, 99, None)] == [
        "F32",
        "F16",
        "Q4_0",
        "Q8_0",
        "Q4_K_M",
        "Q6_K",
        "BF16",
        None,
        None,
    ]


def test_gguf_error_is_a_value_error() -> None:
    assert issubclass(GgufError, ValueError)


def test_non_gguf_file_raises_gguf_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.gguf"
    path.write_bytes(b"PK\x03\x04 this is a zip file, not a model" * 4)

    with pytest.raises(GgufError) as raised:
        read_gguf_metadata(path)

    assert (
        str(raised.value) == f"{path}: not a GGUF file: magic is b'PK\\x03\\x04', expected b'GGUF'"
    )


@pytest.mark.parametrize("size", [0, 3, 20])
def test_file_shorter_than_a_header_raises_gguf_error(tmp_path: Path, size: int) -> None:
    path = tmp_path / "short.gguf"
    path.write_bytes(gguf_bytes(LLAMA)[:size])

    with pytest.raises(GgufError, match=r"too short for a GGUF header"):
        read_gguf_metadata(path)


@pytest.mark.parametrize("version", [1, 4, 0x03000000])
def test_unsupported_version_raises_gguf_error(version: int) -> None:
    data = bytearray(gguf_bytes(LLAMA))
    data[4:8] = struct.pack("<I", version)

    with pytest.raises(GgufError, match=rf"^unsupported GGUF version {version} "):
        read_gguf_metadata(io.BytesIO(bytes(data)))


@pytest.mark.parametrize("cut", [30, 60, 5_000, -3])
def test_truncated_file_raises_gguf_error(cut: int) -> None:
    data = gguf_bytes({**LLAMA, "last": Array(UINT64, [1, 2, 3])})

    with pytest.raises(GgufError, match=r"^truncated: "):
        read_gguf_metadata(io.BytesIO(data[:cut]))


def _header(kv_count: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, kv_count)


def _string(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


ARCH_KV = _string("general.architecture") + struct.pack("<I", STRING) + _string("llama")


def test_string_array_running_past_the_end_raises_gguf_error() -> None:
    strings = struct.pack("<IQ", STRING, 10) + _string("a") + struct.pack("<Q", 99) + b"b"
    data = _header(2) + ARCH_KV + _string("tokens") + struct.pack("<I", 9) + strings

    with pytest.raises(GgufError, match=r"^truncated: "):
        read_gguf_metadata(io.BytesIO(data))


def test_unknown_value_type_raises_gguf_error() -> None:
    data = _header(2) + ARCH_KV + _string("bad") + struct.pack("<IQ", 13, 0)

    with pytest.raises(GgufError, match=r"^corrupt: unknown value type 13 for key 'bad'$"):
        read_gguf_metadata(io.BytesIO(data))


def test_unknown_array_element_type_raises_gguf_error() -> None:
    data = _header(2) + ARCH_KV + _string("bad") + struct.pack("<IIQ", 9, 77, 1)

    with pytest.raises(GgufError, match=r"^corrupt: unknown array element type 77 for key 'bad'$"):
        read_gguf_metadata(io.BytesIO(data))


def test_huge_key_length_raises_gguf_error() -> None:
    data = _header(1) + struct.pack("<Q", 2**40)

    with pytest.raises(GgufError, match=r"^corrupt: a key is 1099511627776 bytes long$"):
        read_gguf_metadata(io.BytesIO(data))


def test_non_utf8_string_raises_gguf_error() -> None:
    data = _header(1) + struct.pack("<Q", 2) + b"\xff\xfe"

    with pytest.raises(GgufError, match=r"is not UTF-8"):
        read_gguf_metadata(io.BytesIO(data))


def test_missing_architecture_raises_gguf_error() -> None:
    with pytest.raises(GgufError, match=r"general\.architecture is missing"):
        read_gguf_metadata(io.BytesIO(gguf_bytes({"general.name": "x"})))


def test_float32_values_keep_float32_precision() -> None:
    data = gguf_bytes({"general.architecture": "llama", "eps": 1e-6}, vocab_size=0)

    value = read_gguf_metadata(io.BytesIO(data)).values["eps"]

    assert value == struct.unpack("<f", struct.pack("<f", 1e-6))[0]
    assert value != 1e-6


def _tensor_info(name: str, ggml_type: int, *dimensions: int) -> bytes:
    encoded = name.encode()
    header = struct.pack("<Q", len(encoded)) + encoded + struct.pack("<I", len(dimensions))
    return (
        header + struct.pack(f"<{len(dimensions)}Q", *dimensions) + struct.pack("<IQ", ggml_type, 0)
    )


@pytest.mark.parametrize(
    ("tensors", "output_type"),
    [
        ([("token_embd.weight", 8), ("blk.0.ffn_down.weight", 12)], 8),  # tied: the embeddings
        ([("token_embd.weight", 8), ("output.weight", 14)], 14),  # its own output layer
        ([("blk.0.ffn_down.weight", 12)], None),
    ],
)
def test_reads_the_output_layers_type_from_the_tensor_table(
    tmp_path: Path, tensors: list[tuple[str, int]], output_type: int | None
) -> None:
    table = b"".join(_tensor_info(name, kind, 640, 1024) for name, kind in tensors)
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(LLAMA, len(tensors), vocab_size=4) + table + bytes(64))
    metadata = read_gguf_metadata(path)
    assert metadata.output_type == output_type
    assert metadata.tensor_bytes is not None


def test_a_cut_tensor_table_gives_no_output_type() -> None:
    data = gguf_bytes(LLAMA, 1, vocab_size=4) + _tensor_info("token_embd.weight", 8, 640)[:-6]
    metadata = read_gguf_metadata(io.BytesIO(data))
    assert metadata.output_type is None and metadata.tensor_bytes is None
