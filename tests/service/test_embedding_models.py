"""Which models embed: embedding GGUFs by their architecture (``embedding`` alone, no
generation), and generative models only when ``LmspApp.embedding_models`` names them; and how
Ollama's ``/api/show`` says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsp_jupyter.engine.catalog import ModelCatalog
from lmsp_jupyter.engine.embedding import EMBEDDING_WINDOW, Embedder, Embedders
from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.service.embeddings import EmbeddingService
from lmsp_jupyter.service.models import ModelDirectory
from lmsp_jupyter.service.ollama import OllamaModels
from tests.doubles import ScriptedEngine
from tests.engine.gguf_files import write_gguf


def directory(tmp_path: Path, pooling: dict[str, str] | None = None) -> ModelDirectory:
    """A BERT GGUF (``bge``) and a llama one (``tiny``), header only, and no bundled model."""
    write_gguf(tmp_path / "bge.gguf", {"general.architecture": "bert", "bert.context_length": 512})
    write_gguf(
        tmp_path / "tiny.gguf", {"general.architecture": "llama", "llama.context_length": 512}
    )
    catalog = ModelCatalog(model_dirs=[tmp_path], include_bundled=False)
    engine = ScriptedEngine()
    return ModelDirectory(catalog, engine, embedding_pooling=pooling)


def test_an_embedding_gguf_only_embeds(tmp_path: Path) -> None:
    models = directory(tmp_path)
    bge = models.entry("bge")
    assert models.capabilities(bge) == ["embedding"]
    assert OllamaModels(models).capabilities(bge) == ["embedding"]


def test_ollama_shows_the_window_a_model_embeds_with(tmp_path: Path) -> None:
    write_gguf(
        tmp_path / "nomic.gguf",
        {"general.architecture": "nomic-bert", "nomic-bert.context_length": 8192},
    )
    models = directory(tmp_path, {"tiny": "mean"})
    ollama = OllamaModels(models)
    assert models.engine.context_length(models.entry("bge")) != 512
    # an embedding model: its own trained context, up to the embedding window
    assert ollama.show("bge").model_info["bert.context_length"] == 512
    assert ollama.show("nomic").model_info["nomic-bert.context_length"] == EMBEDDING_WINDOW
    # a generative model that also embeds: the window it generates with
    shown = ollama.show("tiny").model_info["llama.context_length"]
    assert shown == models.engine.context_length(models.entry("tiny"))


def test_a_generative_model_embeds_only_when_named(tmp_path: Path) -> None:
    plain = directory(tmp_path)
    named = directory(tmp_path, {"tiny": "mean"})
    tiny = plain.entry("tiny")
    assert "embedding" not in plain.capabilities(tiny)
    assert "streaming" in named.capabilities(tiny) and "embedding" in named.capabilities(tiny)
    assert OllamaModels(named).capabilities(tiny) == ["completion", "tools", "embedding"]


async def test_a_model_that_does_not_embed_is_refused_before_loading(tmp_path: Path) -> None:
    models = directory(tmp_path)

    def never(path: Path, pooling: str | None, window: int, threads: int) -> Embedder:
        raise AssertionError("no model may be loaded")

    service = EmbeddingService(models, Embedders(never, threads=1))
    with pytest.raises(LmspError) as caught:
        await service.embed(models.entry("tiny"), ["Hi"])
    assert (caught.value.code, caught.value.param) == ("unsupported_capability", "model")
