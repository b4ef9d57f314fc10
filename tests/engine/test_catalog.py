"""Tests for the model catalog."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lmsp_jupyter.engine import catalog as catalog_module
from lmsp_jupyter.engine.catalog import (
    BUNDLED_MODEL_ID,
    BUNDLED_PACKAGE,
    ModelCatalog,
    ModelEntry,
    default_huggingface_cache_dir,
    default_ollama_dir,
)
from lmsp_jupyter.engine.gguf import GgufMetadata, read_gguf_metadata
from lmsp_jupyter.protocol.errors import LmspError
from tests.engine.gguf_files import gguf_bytes

TEMPLATE = "{{ messages }}"
BUNDLED_SIZE = 253_113_024


def model_bytes(
    name: str,
    arch: str = "llama",
    context_length: int | None = 4096,
    chat_template: str | None = TEMPLATE,
) -> bytes:
    """A small GGUF file; ``name`` makes each file's content distinct."""
    window = {} if context_length is None else {f"{arch}.context_length": context_length}
    template = {} if chat_template is None else {"tokenizer.chat_template": chat_template}
    metadata = {
        "general.architecture": arch,
        "general.name": name,
        "general.file_type": 15,
        **template,
        **window,
    }
    return gguf_bytes(metadata, vocab_size=50)


def model_file(
    path: Path,
    arch: str = "llama",
    context_length: int | None = 4096,
    chat_template: str | None = TEMPLATE,
) -> Path:
    """Write a small GGUF model at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model_bytes(str(path), arch, context_length, chat_template))
    return path


def ids(catalog: ModelCatalog) -> list[str]:
    return [entry.id for entry in catalog.list()]


def directory_catalog(*dirs: Path) -> ModelCatalog:
    return ModelCatalog(model_dirs=dirs, include_bundled=False)


# --- directories -----------------------------------------------------------------------------


def test_directory_model_id_is_the_file_name_without_gguf(tmp_path: Path) -> None:
    model_file(tmp_path / "Qwen3-0.6B-Q8_0.gguf")

    assert ids(directory_catalog(tmp_path)) == ["Qwen3-0.6B-Q8_0"]


def test_directory_entry_reports_the_gguf_metadata(tmp_path: Path) -> None:
    path = model_file(tmp_path / "tiny.gguf", arch="qwen3", context_length=40960)

    [entry] = directory_catalog(tmp_path).list()

    assert entry == ModelEntry(
        id="tiny",
        source="directory",
        size_bytes=path.stat().st_size,
        context_length=40960,
        architecture="qwen3",
        chat_template=TEMPLATE,
        quantization="Q4_K_M",
    )
    assert entry.path() == path


def test_notices_say_which_configured_directories_give_no_model(tmp_path: Path) -> None:
    model_file(tmp_path / "models" / "a.gguf")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no model here")
    (tmp_path / "file.txt").write_text("")
    catalog = directory_catalog(
        tmp_path / "models", tmp_path / "missing", tmp_path / "empty", tmp_path / "file.txt"
    )

    assert ids(catalog) == ["a"]
    assert catalog.notices() == [
        f"model directory {tmp_path / 'missing'} does not exist",
        f"model directory {tmp_path / 'empty'} holds no .gguf model file",
        f"model directory {tmp_path / 'file.txt'} is not a directory",
    ]


def test_no_notices_when_every_directory_holds_a_model(tmp_path: Path) -> None:
    model_file(tmp_path / "deep" / "er" / "a.gguf")

    assert directory_catalog(tmp_path).notices() == []


def test_missing_context_length_falls_back_to_2048(tmp_path: Path) -> None:
    model_file(tmp_path / "old.gguf", context_length=None)

    assert directory_catalog(tmp_path).get("old").context_length == 2048


def test_directories_are_scanned_recursively(tmp_path: Path) -> None:
    model_file(tmp_path / "a" / "b" / "deep.gguf")
    model_file(tmp_path / "a" / "mid.gguf")
    model_file(tmp_path / "top.gguf")
    (tmp_path / "a" / "notes.txt").write_text("not a model")

    assert sorted(ids(directory_catalog(tmp_path))) == ["deep", "mid", "top"]


def test_symlinked_directories_are_followed_once(tmp_path: Path) -> None:
    model_file(tmp_path / "store" / "linked.gguf")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "store").symlink_to(tmp_path / "store")
    (tmp_path / "store" / "loop").symlink_to(tmp_path / "store")

    assert ids(directory_catalog(tmp_path / "models")) == ["linked"]


def test_mmproj_files_are_skipped(tmp_path: Path) -> None:
    model_file(tmp_path / "gemma-3-4b-it-Q4_K_M.gguf")
    model_file(tmp_path / "mmproj-gemma-3-4b-it-f16.gguf")
    model_file(tmp_path / "mmproj-model-f16.gguf")

    assert ids(directory_catalog(tmp_path)) == ["gemma-3-4b-it-Q4_K_M"]


def test_vision_projectors_with_clip_architecture_are_skipped(tmp_path: Path) -> None:
    model_file(tmp_path / "projector.gguf", arch="clip")
    model_file(tmp_path / "model.gguf")

    assert ids(directory_catalog(tmp_path)) == ["model"]


def test_split_model_is_one_entry_without_shard_suffix_and_with_summed_size(
    tmp_path: Path,
) -> None:
    first = model_file(tmp_path / "big-00001-of-00003.gguf")
    second = tmp_path / "big-00002-of-00003.gguf"
    second.write_bytes(gguf_bytes({"general.architecture": "llama", "split.no": 1}, padding=500))
    third = tmp_path / "big-00003-of-00003.gguf"
    third.write_bytes(gguf_bytes({"general.architecture": "llama", "split.no": 2}, padding=900))

    [entry] = directory_catalog(tmp_path).list()

    assert entry.id == "big"
    assert entry.size_bytes == sum(p.stat().st_size for p in (first, second, third))
    assert entry.context_length == 4096
    assert entry.path() == first


def test_split_model_with_a_missing_shard_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model_file(tmp_path / "big-00001-of-00003.gguf")
    model_file(tmp_path / "big-00003-of-00003.gguf")

    assert ids(directory_catalog(tmp_path)) == []
    assert "missing ['big-00002-of-00003.gguf']" in caplog.text


def test_non_first_shards_alone_are_not_listed(tmp_path: Path) -> None:
    model_file(tmp_path / "orphan-00002-of-00002.gguf")

    assert ids(directory_catalog(tmp_path)) == []


def test_invalid_gguf_files_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "broken.gguf").write_bytes(b"not a gguf file at all, sorry")
    (tmp_path / "cut.gguf").write_bytes(model_bytes("cut")[:100])
    model_file(tmp_path / "good.gguf")

    with caplog.at_level(logging.WARNING, logger=catalog_module.__name__):
        listed = ids(directory_catalog(tmp_path))

    assert listed == ["good"]
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "skipping model 'broken'",
        "skipping model 'cut'",
    ]


def test_an_invalid_file_is_warned_about_once_across_rescans(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "broken.gguf").write_bytes(b"garbage!" * 10)
    catalog = directory_catalog(tmp_path)

    with caplog.at_level(logging.WARNING, logger=catalog_module.__name__):
        catalog.list()
        catalog.list()

    assert len(caplog.records) == 1


def test_missing_directory_lists_nothing(tmp_path: Path) -> None:
    assert ids(directory_catalog(tmp_path / "does-not-exist")) == []


# --- Ollama ----------------------------------------------------------------------------------


def ollama_model(
    ollama_dir: Path,
    name: str,
    *,
    write_blob: bool = True,
    context_length: int = 40960,
    chat_template: str | None = TEMPLATE,
    template: str | None = None,
) -> Path:
    """Lay out an Ollama model ``host/namespace/model/tag`` (its template layer's blob holding
    ``template``, absent when ``None``); return its blob path."""
    data = model_bytes(name, "qwen3", context_length, chat_template)
    digest = hashlib.sha256(data).hexdigest()
    blob = ollama_dir / "blobs" / f"sha256-{digest}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    if write_blob:
        blob.write_bytes(data)
    template_digest = "d" * 64
    if template is not None:
        template_digest = hashlib.sha256(template.encode()).hexdigest()
        (ollama_dir / "blobs" / f"sha256-{template_digest}").write_text(template)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "digest": "sha256:" + "c" * 64,
            "size": 485,
        },
        "layers": [
            {
                "mediaType": "application/vnd.ollama.image.model",
                "digest": f"sha256:{digest}",
                "size": len(data),
            },
            {
                "mediaType": "application/vnd.ollama.image.template",
                "digest": f"sha256:{template_digest}",
                "size": 1000,
            },
        ],
    }
    manifest_path = ollama_dir / "manifests" / name
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps(manifest))
    return blob


def ollama_catalog(ollama_dir: Path) -> ModelCatalog:
    return ModelCatalog(ollama_dir=ollama_dir, include_bundled=False)


def test_ollama_library_model_id_is_model_colon_tag(tmp_path: Path) -> None:
    blob = ollama_model(tmp_path, "registry.ollama.ai/library/qwen3/14b-q4_k_m")

    [entry] = ollama_catalog(tmp_path).list()

    assert (entry.id, entry.source, entry.size_bytes) == (
        "qwen3:14b-q4_k_m",
        "ollama",
        blob.stat().st_size,
    )
    assert (entry.architecture, entry.context_length) == ("qwen3", 40960)
    assert entry.path() == blob


def test_ollama_namespaced_model_id_keeps_the_namespace(tmp_path: Path) -> None:
    ollama_model(tmp_path, "registry.ollama.ai/huihui_ai/qwen3-abliterated/8b")

    assert ids(ollama_catalog(tmp_path)) == ["huihui_ai/qwen3-abliterated:8b"]


def test_ollama_model_from_another_host_keeps_host_and_namespace(tmp_path: Path) -> None:
    ollama_model(tmp_path, "hf.co/unsloth/Qwen3-8B-GGUF/Q4_K_M")

    assert ids(ollama_catalog(tmp_path)) == ["hf.co/unsloth/Qwen3-8B-GGUF:Q4_K_M"]


def test_ollama_manifest_whose_blob_is_missing_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ollama_model(tmp_path, "registry.ollama.ai/library/gone/latest", write_blob=False)
    ollama_model(tmp_path, "registry.ollama.ai/library/here/latest")

    assert ids(ollama_catalog(tmp_path)) == ["here:latest"]
    assert "skipping Ollama model 'gone:latest': blob" in caplog.text


def test_problems_found_by_scans_are_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ollama_model(tmp_path, "registry.ollama.ai/library/gone/latest", write_blob=False)
    catalog = ollama_catalog(tmp_path)

    with caplog.at_level(logging.WARNING, logger=catalog_module.__name__):
        catalog.list()
        catalog.list()

    assert len(caplog.records) == 1


def test_bad_ollama_manifests_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manifests = tmp_path / "manifests" / "registry.ollama.ai" / "library"
    (manifests / "notjson").mkdir(parents=True)
    (manifests / "notjson" / "latest").write_text("{nope")
    (manifests / "nomodel").mkdir()
    (manifests / "nomodel" / "latest").write_text(json.dumps({"layers": []}))
    (manifests / "baddigest").mkdir()
    (manifests / "baddigest" / "latest").write_text(
        json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": "x"}]})
    )
    ollama_model(tmp_path, "registry.ollama.ai/library/fine/1b")

    with caplog.at_level(logging.WARNING, logger=catalog_module.__name__):
        assert ids(ollama_catalog(tmp_path)) == ["fine:1b"]

    assert sorted(r.getMessage() for r in caplog.records) == [
        f"skipping Ollama manifest {manifests / 'baddigest' / 'latest'}: bad model digest 'x'",
        f"skipping Ollama manifest {manifests / 'nomodel' / 'latest'}: no model layer",
        f"skipping Ollama manifest {manifests / 'notjson' / 'latest'}: Expecting property name"
        " enclosed in double quotes: line 1 column 2 (char 1)",
    ]


def test_missing_ollama_dir_lists_nothing(tmp_path: Path) -> None:
    assert ids(ollama_catalog(tmp_path / "nothing")) == []


# --- kinds -----------------------------------------------------------------------------------

GO_TEMPLATE = "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>{{ end }}{{ .Prompt }}"


def kinds(catalog: ModelCatalog) -> dict[str, str]:
    return {entry.id: entry.kind for entry in catalog.list()}


def test_a_model_with_a_chat_template_in_its_gguf_is_a_chat_model(tmp_path: Path) -> None:
    model_file(tmp_path / "chat.gguf")
    model_file(tmp_path / "base.gguf", chat_template=None)
    model_file(tmp_path / "empty.gguf", chat_template="")

    catalog = directory_catalog(tmp_path)

    assert kinds(catalog) == {"base": "base", "chat": "chat", "empty": "base"}
    assert catalog.get("empty").chat_template is None


def test_an_ollama_manifests_template_makes_a_chat_model_unless_it_is_the_plain_one(
    tmp_path: Path,
) -> None:
    library = "registry.ollama.ai/library"
    ollama_model(tmp_path, f"{library}/chat/go", chat_template=None, template=GO_TEMPLATE)
    ollama_model(tmp_path, f"{library}/plain/go", chat_template=None, template="{{ .Prompt }}\n")
    ollama_model(tmp_path, f"{library}/none/go", chat_template=None)

    catalog = ollama_catalog(tmp_path)

    assert kinds(catalog) == {"chat:go": "chat", "none:go": "base", "plain:go": "base"}
    assert catalog.get("chat:go").ollama_template == GO_TEMPLATE
    assert catalog.get("chat:go").chat_template is None


def test_a_configured_chat_template_replaces_what_the_files_say(tmp_path: Path) -> None:
    model_file(tmp_path / "chat.gguf")
    model_file(tmp_path / "base.gguf", chat_template=None)
    ollama_model(tmp_path / "ollama", "registry.ollama.ai/library/go/1b", template=GO_TEMPLATE)
    configured = {"chat": "", "base": "{{ messages[0].content }}", "go:1b": ""}

    catalog = ModelCatalog(
        model_dirs=[tmp_path],
        ollama_dir=tmp_path / "ollama",
        include_bundled=False,
        chat_templates=configured,
    )

    assert kinds(catalog) == {"base": "chat", "chat": "base", "go:1b": "base"}
    assert catalog.get("base").chat_template == "{{ messages[0].content }}"
    assert (catalog.get("chat").chat_template, catalog.get("go:1b").ollama_template) == (None, None)


def test_the_bundled_model_is_a_base_model(bundled_model_path: Path) -> None:
    assert ModelCatalog().get(BUNDLED_MODEL_ID).kind == "base"


# --- Hugging Face ----------------------------------------------------------------------------


def hf_file(cache: Path, repo: str, revision: str, filename: str, data: bytes) -> Path:
    """Store ``data`` as a blob and link it from the snapshot, like ``huggingface_hub``."""
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    link = repo_dir / "snapshots" / revision / filename
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    return link


def hf_catalog(cache: Path) -> ModelCatalog:
    return ModelCatalog(huggingface_cache_dir=cache, include_bundled=False)


def test_huggingface_model_id_is_org_name_and_file_stem(tmp_path: Path) -> None:
    data = model_bytes("hf", arch="qwen3")
    link = hf_file(tmp_path, "Qwen/Qwen3-0.6B-GGUF", "a1b2", "Qwen3-0.6B-Q8_0.gguf", data)

    [entry] = hf_catalog(tmp_path).list()

    assert (entry.id, entry.source) == ("Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0", "huggingface")
    assert entry.path() == link


def test_huggingface_size_is_that_of_the_symlinked_blob(tmp_path: Path) -> None:
    data = model_bytes("hf") + bytes(12345)
    link = hf_file(tmp_path, "org/repo", "rev", "model.gguf", data)

    [entry] = hf_catalog(tmp_path).list()

    assert link.is_symlink()
    assert entry.size_bytes == len(data)


def test_huggingface_newest_revision_of_a_file_wins(tmp_path: Path) -> None:
    newer = hf_file(tmp_path, "org/repo", "aaa", "m.gguf", model_bytes("new", context_length=8192))
    older = hf_file(tmp_path, "org/repo", "bbb", "m.gguf", model_bytes("old", context_length=1024))
    os.utime(older, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    os.utime(newer, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))

    [entry] = hf_catalog(tmp_path).list()

    assert (entry.id, entry.context_length, entry.path()) == ("org/repo/m", 8192, newer)


def test_huggingface_files_follow_the_split_and_mmproj_rules(tmp_path: Path) -> None:
    shards = [
        hf_file(tmp_path, "unsloth/Big-GGUF", "r", f"Big-Q4_K_M-0000{i}-of-00002.gguf", data)
        for i, data in ((1, model_bytes("s1")), (2, model_bytes("s2") + bytes(100)))
    ]
    hf_file(tmp_path, "unsloth/Big-GGUF", "r", "mmproj-F16.gguf", model_bytes("p"))

    [entry] = hf_catalog(tmp_path).list()

    assert (entry.id, entry.size_bytes) == (
        "unsloth/Big-GGUF/Big-Q4_K_M",
        sum(s.stat().st_size for s in shards),
    )
    assert entry.path() == shards[0]


def test_huggingface_files_in_snapshot_subfolders_keep_their_folder(tmp_path: Path) -> None:
    hf_file(tmp_path, "org/repo", "r", "BF16/model-BF16.gguf", model_bytes("bf16"))

    assert ids(hf_catalog(tmp_path)) == ["org/repo/BF16/model-BF16"]


def test_huggingface_broken_symlinks_are_skipped(tmp_path: Path) -> None:
    link = hf_file(tmp_path, "org/repo", "r", "gone.gguf", model_bytes("gone"))
    link.resolve().unlink()
    hf_file(tmp_path, "org/repo", "r", "kept.gguf", model_bytes("kept"))

    assert ids(hf_catalog(tmp_path)) == ["org/repo/kept"]


# --- across sources --------------------------------------------------------------------------


def test_sources_are_listed_directories_then_ollama_then_huggingface(tmp_path: Path) -> None:
    hf_file(tmp_path / "hf", "org/repo", "r", "zz.gguf", model_bytes("hf"))
    ollama_model(tmp_path / "ollama", "registry.ollama.ai/library/mm/latest")
    model_file(tmp_path / "dir2" / "bb.gguf")
    model_file(tmp_path / "dir1" / "cc.gguf")

    catalog = ModelCatalog(
        model_dirs=[tmp_path / "dir1", tmp_path / "dir2"],
        ollama_dir=tmp_path / "ollama",
        huggingface_cache_dir=tmp_path / "hf",
        include_bundled=False,
    )

    assert [(e.id, e.source) for e in catalog.list()] == [
        ("cc", "directory"),
        ("bb", "directory"),
        ("mm:latest", "ollama"),
        ("org/repo/zz", "huggingface"),
    ]


def test_first_model_wins_when_ids_collide(tmp_path: Path) -> None:
    first = model_file(tmp_path / "a" / "same.gguf", context_length=1111)
    model_file(tmp_path / "b" / "same.gguf", context_length=2222)

    [entry] = directory_catalog(tmp_path / "a", tmp_path / "b").list()

    assert (entry.id, entry.context_length, entry.path()) == ("same", 1111, first)


def test_a_file_found_twice_is_listed_once(tmp_path: Path) -> None:
    model_file(tmp_path / "models" / "sub" / "x.gguf")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "alias.gguf").symlink_to(tmp_path / "models" / "sub" / "x.gguf")

    catalog = directory_catalog(
        tmp_path / "models", tmp_path / "models" / "sub", tmp_path / "links"
    )

    assert ids(catalog) == ["x"]


def test_an_invalid_file_does_not_hide_a_valid_one_with_the_same_id(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.gguf").write_bytes(b"junk" * 20)
    valid = model_file(tmp_path / "b" / "m.gguf")

    assert directory_catalog(tmp_path / "a", tmp_path / "b").get("m").path() == valid


def test_get_returns_the_model_with_that_id(tmp_path: Path) -> None:
    model_file(tmp_path / "one.gguf")
    path = model_file(tmp_path / "two.gguf")

    assert directory_catalog(tmp_path).get("two").path() == path


def test_get_unknown_model_raises_model_not_found(tmp_path: Path) -> None:
    with pytest.raises(LmspError) as raised:
        directory_catalog(tmp_path).get("nope:latest")

    error = raised.value
    assert (error.code, error.detail, error.param, error.status) == (
        "model_not_found",
        "model 'nope:latest' is not available",
        "model",
        404,
    )


def test_entry_without_a_location_has_no_path() -> None:
    entry = ModelEntry("m", "directory", 1, 2048, "llama", None)

    with pytest.raises(LmspError) as raised:
        entry.path()

    assert raised.value.code == "model_not_found"


@pytest.fixture
def read_calls(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The sources the catalog reads GGUF headers from."""
    calls: list[object] = []

    def counting(source: Any) -> GgufMetadata:
        calls.append(source)
        return read_gguf_metadata(source)

    monkeypatch.setattr(catalog_module, "read_gguf_metadata", counting)
    return calls


def test_rescans_reuse_metadata_of_unchanged_files(
    tmp_path: Path, read_calls: list[object]
) -> None:
    model_file(tmp_path / "a.gguf")
    model_file(tmp_path / "b.gguf")
    catalog = directory_catalog(tmp_path)

    catalog.list()
    catalog.list()
    catalog.get("a")

    assert len(read_calls) == 2


def test_rescans_reread_changed_files_and_see_new_and_removed_ones(
    tmp_path: Path, read_calls: list[object]
) -> None:
    changed = model_file(tmp_path / "changed.gguf", context_length=1000)
    removed = model_file(tmp_path / "removed.gguf")
    catalog = directory_catalog(tmp_path)
    catalog.list()

    model_file(changed, context_length=9000)
    os.utime(changed, ns=(1, 1))
    removed.unlink()
    model_file(tmp_path / "added.gguf")
    entries = {e.id: e.context_length for e in catalog.list()}

    assert entries == {"added": 4096, "changed": 9000}
    assert len(read_calls) == 4


# --- default locations -----------------------------------------------------------------------


def test_default_ollama_dir_uses_ollama_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_MODELS", "/data/ollama")

    assert default_ollama_dir() == Path("/data/ollama")


def test_default_ollama_dir_falls_back_to_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))

    assert default_ollama_dir() == tmp_path / ".ollama" / "models"


def test_default_huggingface_cache_dir_uses_hf_hub_cache_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", "/data/hub")
    monkeypatch.setenv("HF_HOME", "/data/hf")

    assert default_huggingface_cache_dir() == Path("/data/hub")


def test_default_huggingface_cache_dir_uses_hf_home_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", "/data/hf")

    assert default_huggingface_cache_dir() == Path("/data/hf/hub")


def test_default_huggingface_cache_dir_falls_back_to_home_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))

    assert default_huggingface_cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"


# --- bundled ---------------------------------------------------------------------------------


@pytest.fixture
def bundled() -> ModuleType:
    """The bundled model's package (the tests are skipped when it is not installed)."""
    module: ModuleType = pytest.importorskip(BUNDLED_PACKAGE)
    return module


@pytest.fixture
def no_assembly(bundled: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the bundled model is assembled."""

    def fail(*args: object, **kwargs: object) -> Path:
        raise AssertionError("the listing assembled the bundled model")

    monkeypatch.setattr(catalog_module._BundledFile, "_assemble", fail)


@pytest.mark.usefixtures("no_assembly")
def test_bundled_model_is_listed_first(tmp_path: Path) -> None:
    model_file(tmp_path / "a.gguf")

    assert ids(ModelCatalog(model_dirs=[tmp_path])) == [BUNDLED_MODEL_ID, "a"]


@pytest.mark.usefixtures("no_assembly")
def test_bundled_entry_is_described_from_its_chunks_without_assembling(
    bundled: ModuleType,
) -> None:
    [entry] = ModelCatalog().list()

    assert BUNDLED_MODEL_ID == "gemma3:270m-q4_k_m"
    assert entry == ModelEntry(
        id="gemma3:270m-q4_k_m",
        source="bundled",
        size_bytes=BUNDLED_SIZE,
        context_length=32768,
        architecture="gemma3",
        chat_template=None,
        quantization="Q4_K_M",
    )
    assert entry.size_bytes == sum(p.stat().st_size for p in bundled.chunk_paths())


@pytest.mark.usefixtures("no_assembly")
def test_bundled_entry_knows_its_weights_and_kv_cache_per_token() -> None:
    entry = ModelCatalog().get(BUNDLED_MODEL_ID)

    # Tensor data: the file less its header (the vocabulary of 262k tokens, about 6.5 MB).
    assert entry.weights_bytes == 246_587_904
    assert BUNDLED_SIZE - 7_000_000 < entry.weights_bytes < BUNDLED_SIZE
    # 18 layers x 1 KV head x (256 key + 256 value) x 2 bytes (f16).
    assert entry.kv_bytes_per_token == 18 * 1 * (256 + 256) * 2


def test_bundled_model_is_left_out_when_the_package_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, BUNDLED_PACKAGE, None)

    assert ModelCatalog().list() == []


def test_bundled_model_is_left_out_when_disabled() -> None:
    assert ModelCatalog(include_bundled=False).list() == []


def test_bundled_path_assembles_the_gguf_once_for_concurrent_first_calls(
    bundled: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # the package writes under ~/.cache
    assembly = catalog_module._BundledFile()
    monkeypatch.setattr(catalog_module, "_assemble_bundled", assembly)
    entry = ModelCatalog().get(BUNDLED_MODEL_ID)
    seen: list[catalog_module.AssemblyProgress] = []
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            if (progress := catalog_module.bundled_progress()) is not None:
                seen.append(progress)

    watcher = threading.Thread(target=watch)
    watcher.start()
    paths: list[Path] = []
    caplog.set_level(logging.INFO, logger=catalog_module.__name__)
    threads = [threading.Thread(target=lambda: paths.append(entry.path())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    watching.set()
    watcher.join()
    paths.append(ModelCatalog().get(BUNDLED_MODEL_ID).path())

    target = tmp_path / ".cache" / BUNDLED_PACKAGE / bundled.MODEL_NAME
    assert paths == [target] * 5
    assert [r.getMessage() for r in caplog.records if "assembled" in r.getMessage()] == [
        f"assembled the bundled model {BUNDLED_MODEL_ID} ({BUNDLED_SIZE // 10**6} MB)"
    ]
    assembling = [r.getMessage() for r in caplog.records if "assembling the GGUF" in r.getMessage()]
    assert assembling[-1].endswith(f"100% ({BUNDLED_SIZE // 10**6} of {BUNDLED_SIZE // 10**6} MB)")
    assert {p.stage for p in seen} <= {"assembling the GGUF file"}
    fractions = [p.fraction for p in seen]
    assert fractions == sorted(fractions) and 0 < fractions[0] <= fractions[-1] <= 1
    assert catalog_module.bundled_progress() is None
    assert list(target.parent.iterdir()) == [target]  # no partial file left
    assert target.stat().st_size == BUNDLED_SIZE
    assert read_gguf_metadata(target) == read_gguf_metadata(bundled.chunk_paths())


def test_a_damaged_bundled_file_is_assembled_again(
    bundled: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(catalog_module, "_assemble_bundled", catalog_module._BundledFile())
    target = tmp_path / ".cache" / BUNDLED_PACKAGE / bundled.MODEL_NAME
    target.parent.mkdir(parents=True)
    target.write_bytes(b"\0" * BUNDLED_SIZE)

    assert ModelCatalog().get(BUNDLED_MODEL_ID).path() == target
    assert read_gguf_metadata(target) == read_gguf_metadata(bundled.chunk_paths())
