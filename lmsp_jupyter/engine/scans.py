"""Scans for GGUF models in the places the catalog looks: configured directories, Ollama's
store and the Hugging Face hub cache, by the file rules they share (split files, projectors)."""

from __future__ import annotations

import builtins
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

logger = logging.getLogger(__name__)

#: Where a model comes from.
ModelSource = Literal["bundled", "directory", "ollama", "huggingface", "remote"]

_OLLAMA_MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
_OLLAMA_DEFAULT_HOST = "registry.ollama.ai"
_OLLAMA_DEFAULT_NAMESPACE = "library"
_SHA256_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_SHARD = re.compile(r"(?P<base>.+)-(?P<index>\d{5})-of-(?P<total>\d{5})")

_warned: set[str] = set()


def warn_once(message: str, *args: object) -> None:
    """Log a warning about the library, once per process: listings rescan on every request."""
    text = message % args
    if text not in _warned:
        _warned.add(text)
        logger.warning("%s", text)


@dataclass(frozen=True)
class ScannedModel:
    """A model file set found by a scan, before its header is read."""

    id: str
    source: ModelSource
    files: tuple[Path, ...]  # all files of the model; the header starts in files[0]
    location: Path | Callable[[], Path]
    chained: bool = False  # the files are consecutive chunks of one GGUF file


# --- shared file rules -----------------------------------------------------------------------


def _is_gguf(name: str) -> bool:
    return name.lower().endswith(".gguf")


def _gguf_models(
    directory: Path, filenames: Iterable[str]
) -> Iterator[tuple[str, tuple[Path, ...]]]:
    """The models among the files of one directory: (name without ``.gguf``, files).

    Vision projectors (``mmproj*``) and non-first shards of split files are left out; the first
    shard of a split file stands for all its shards and is named without the shard suffix.
    """
    names = {name for name in filenames if _is_gguf(name)}
    for name in sorted(names):
        if name.lower().startswith("mmproj"):
            continue
        stem, suffix = name[:-5], name[-5:]
        shard = _SHARD.fullmatch(stem)
        if shard is None:
            yield stem, (directory / name,)
            continue
        if int(shard["index"]) != 1:
            continue
        total = int(shard["total"])
        base = shard["base"]
        shard_names = [f"{base}-{i:05d}-of-{total:05d}{suffix}" for i in range(1, total + 1)]
        missing = [shard_name for shard_name in shard_names if shard_name not in names]
        if missing:
            warn_once("skipping split model %s: missing %s", directory / name, missing)
            continue
        yield base, tuple(directory / shard_name for shard_name in shard_names)


def _walk(root: Path) -> Iterator[tuple[Path, builtins.list[str]]]:
    """Every directory under ``root`` (following symlinks, once each) and its file names."""
    visited: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        if (st.st_dev, st.st_ino) in visited:
            dirnames[:] = []
            continue
        visited.add((st.st_dev, st.st_ino))
        dirnames.sort()
        yield Path(dirpath), filenames


# --- directories -----------------------------------------------------------------------------


def scan_directory(root: Path) -> Iterator[ScannedModel]:
    """The models in ``root`` and the directories below it, named by their file names."""
    for directory, filenames in _walk(root):
        for model_id, files in _gguf_models(directory, filenames):
            yield ScannedModel(model_id, "directory", files, files[0])


# --- Ollama ----------------------------------------------------------------------------------


def scan_ollama(ollama_dir: Path) -> Iterator[ScannedModel]:
    """The models Ollama pulled, named as Ollama names them."""
    manifests = ollama_dir / "manifests"
    for manifest in sorted(manifests.glob("*/*/*/*")):
        if not manifest.is_file():
            continue
        host, namespace, model, tag = manifest.relative_to(manifests).parts
        model_id = _ollama_id(host, namespace, model, tag)
        blob = _ollama_blob(ollama_dir, manifest)
        if blob is None:
            continue
        if not blob.is_file():
            warn_once("skipping Ollama model %r: blob %s is missing", model_id, blob)
            continue
        yield ScannedModel(model_id, "ollama", (blob,), blob)


def _ollama_id(host: str, namespace: str, model: str, tag: str) -> str:
    if host != _OLLAMA_DEFAULT_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    if namespace != _OLLAMA_DEFAULT_NAMESPACE:
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


def _ollama_blob(ollama_dir: Path, manifest: Path) -> Path | None:
    """The model blob an Ollama manifest names, or ``None`` (with a warning) if it names none."""
    try:
        digest = _ollama_model_digest(json.loads(manifest.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        warn_once("skipping Ollama manifest %s: %s", manifest, exc)
        return None
    match = _SHA256_DIGEST.fullmatch(digest)
    if match is None:
        warn_once("skipping Ollama manifest %s: bad model digest %r", manifest, digest)
        return None
    return ollama_dir / "blobs" / f"sha256-{match[1]}"


def _ollama_model_digest(document: object) -> str:
    """The digest of the model layer of a parsed manifest; ``ValueError`` if it has none."""
    layers = document.get("layers") if isinstance(document, dict) else None
    for layer in layers if isinstance(layers, list) else ():
        if isinstance(layer, dict) and layer.get("mediaType") == _OLLAMA_MODEL_MEDIA_TYPE:
            digest = layer.get("digest")
            if isinstance(digest, str):
                return digest
    raise ValueError("no model layer")


# --- Hugging Face ----------------------------------------------------------------------------


def scan_huggingface(cache_dir: Path) -> Iterator[ScannedModel]:
    """The newest snapshot's GGUF files of each repository in the hub cache (``org/name/file``)."""
    for repo_dir in sorted(cache_dir.glob("models--*")):
        repo = _huggingface_repo(repo_dir.name)
        if repo is None:
            continue
        newest: dict[str, tuple[int, tuple[Path, ...]]] = {}
        for snapshot in sorted((repo_dir / "snapshots").glob("*")):
            for relative_id, files in _snapshot_models(snapshot):
                mtime = _mtime(files[0])
                if mtime is not None and (
                    relative_id not in newest or mtime > newest[relative_id][0]
                ):
                    newest[relative_id] = (mtime, files)
        for relative_id, (_, files) in sorted(newest.items()):
            yield ScannedModel(f"{repo}/{relative_id}", "huggingface", files, files[0])


def _huggingface_repo(dir_name: str) -> str | None:
    """``org/name`` from a cache folder name ``models--org--name``."""
    parts = dir_name.split("--")[1:]
    if not parts or not all(parts):
        return None
    return "/".join(parts)


def _snapshot_models(snapshot: Path) -> Iterator[tuple[str, tuple[Path, ...]]]:
    """The models in one snapshot, named by their path in it without ``.gguf``."""
    for directory, filenames in _walk(snapshot):
        prefix = directory.relative_to(snapshot).as_posix()
        for name, files in _gguf_models(directory, filenames):
            yield (name if prefix == "." else f"{prefix}/{name}"), files


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError as exc:
        warn_once("skipping %s: %s", path, exc)
        return None
