"""The jupyter-server extension ``lmsp``: settings, wiring, and ``jupyter lmsp``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Float, Int, List, Unicode, default

from ..engine.catalog import (
    BUNDLED_MODEL_ID,
    ModelCatalog,
    default_huggingface_cache_dir,
    default_ollama_dir,
)
from ..engine.scheduler import Engine, EngineSettings
from ..service.models import ModelDirectory
from ..service.responses import ResponseService
from .handlers import default_handlers


class LmspApp(ExtensionApp):
    """Serves LMSP 1.0 under ``{base_url}lmsp/v1`` from the GGUF models on this machine."""

    name = "lmsp"
    description = "LMSP 1.0: local language models served from the Jupyter server."
    load_other_extensions = True

    model_dirs = List(
        Unicode(),
        default_value=[],
        help="Directories searched (recursively) for .gguf model files.",
    ).tag(config=True)

    ollama_dir = Unicode(
        help="An Ollama model store (manifests/ and blobs/) whose models are offered too. "
        "Default: $OLLAMA_MODELS or ~/.ollama/models. Empty string: do not look.",
    ).tag(config=True)

    huggingface_cache_dir = Unicode(
        help="A Hugging Face hub cache whose .gguf files are offered too. "
        "Default: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub. Empty: do not look.",
    ).tag(config=True)

    default_model = Unicode(
        BUNDLED_MODEL_ID,
        help="The model clients use when they name none (the %lmsp magic, the quickstart).",
    ).tag(config=True)

    context_size = Int(
        8192,
        help="Context window in tokens given to each loaded model, capped by what the model "
        "was trained for. 0: the model's full trained context.",
    ).tag(config=True)

    threads = Int(
        os.cpu_count() or 1,
        help="CPU threads llama.cpp uses per model, for prompts and generation alike. "
        "Default: every core (llama-cpp-python's own default, half of them, is slower).",
    ).tag(config=True)

    batch_size = Int(512, help="Prompt tokens evaluated per llama.cpp batch.").tag(config=True)

    max_body_bytes = Int(
        8 * 1024 * 1024, help="Largest request body accepted; larger → 413 payload_too_large."
    ).tag(config=True)

    keepalive_seconds = Float(
        15.0, help="Idle seconds after which a stream sends a ': keep-alive' comment."
    ).tag(config=True)

    @default("ollama_dir")
    def _default_ollama_dir(self) -> str:
        return str(default_ollama_dir())

    @default("huggingface_cache_dir")
    def _default_huggingface_cache_dir(self) -> str:
        return str(default_huggingface_cache_dir())

    def initialize_settings(self) -> None:
        """Build the catalog, engine and services and share them with the handlers."""
        catalog = ModelCatalog(
            model_dirs=[Path(d).expanduser() for d in self.model_dirs],
            ollama_dir=Path(self.ollama_dir).expanduser() if self.ollama_dir else None,
            huggingface_cache_dir=(
                Path(self.huggingface_cache_dir).expanduser()
                if self.huggingface_cache_dir
                else None
            ),
        )
        self.engine = Engine(
            EngineSettings(
                context_size=self.context_size, threads=self.threads, batch_size=self.batch_size
            )
        )
        models = ModelDirectory(catalog, self.engine)
        self.settings.update(
            lmsp_models=models,
            lmsp_responses=ResponseService(models, self.engine),
            lmsp_default_model=self.default_model,
            lmsp_max_body_bytes=self.max_body_bytes,
            lmsp_keepalive_seconds=self.keepalive_seconds,
        )

    def initialize_handlers(self) -> None:
        """Mount the LMSP routes."""
        self.handlers.extend(default_handlers)

    async def stop_extension(self) -> None:
        """Stop the model workers."""
        engine: Engine | None = getattr(self, "engine", None)
        if engine is not None:
            engine.close()


def main(argv: list[str] | None = None, **kwargs: Any) -> None:
    """``jupyter lmsp``: run the LMSP service on its own Jupyter server."""
    LmspApp.launch_instance(argv, open_browser=False, **kwargs)  # type: ignore[no-untyped-call]
