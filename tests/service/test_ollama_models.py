"""The models as Ollama names, lists and shows them."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsp_jupyter.engine.catalog import ModelCatalog
from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.service.models import ModelDirectory
from lmsp_jupyter.service.ollama import OllamaModels
from tests.chat_template import GEMMA_TEMPLATE
from tests.doubles import ScriptedEngine
from tests.engine.gguf_files import write_gguf
from tests.service.test_embedding_models import directory


def test_a_name_means_the_id_with_or_without_the_latest_tag(tmp_path: Path) -> None:
    models = OllamaModels(directory(tmp_path))
    assert models.entry("tiny").id == "tiny"
    assert models.entry("tiny:latest").id == "tiny"
    with pytest.raises(LmspError) as caught:
        models.entry("tiny:7b")
    assert caught.value.code == "model_not_found"
    assert caught.value.detail == "model 'tiny:7b' not found"


def test_tags_list_every_model_with_its_family_and_a_stable_digest(tmp_path: Path) -> None:
    models = OllamaModels(directory(tmp_path))
    listed = {model.name: model for model in models.tags().models}
    assert set(listed) == {"bge", "tiny"}
    assert (listed["bge"].details.family, listed["tiny"].details.family) == ("bert", "llama")
    assert models.tags().models[0].digest == models.tags().models[0].digest
    assert listed["bge"].digest != listed["tiny"].digest


def test_show_has_the_context_length_under_the_family(tmp_path: Path) -> None:
    shown = OllamaModels(directory(tmp_path)).show("tiny")
    assert shown.model_info["general.architecture"] == "llama"
    assert shown.model_info["llama.context_length"] > 0
    assert shown.capabilities == ["completion", "tools"]


def test_ps_lists_no_model_that_is_not_loaded(tmp_path: Path) -> None:
    assert OllamaModels(directory(tmp_path)).running().models == []


def test_show_gives_a_chat_models_template_and_a_base_models_prompt_as_it_is(
    tmp_path: Path,
) -> None:
    directory(tmp_path)
    write_gguf(
        tmp_path / "chat.gguf",
        {"general.architecture": "llama", "tokenizer.chat_template": GEMMA_TEMPLATE},
    )
    models = OllamaModels(
        ModelDirectory(ModelCatalog(model_dirs=[tmp_path], include_bundled=False), ScriptedEngine())
    )
    assert models.show("chat").template == GEMMA_TEMPLATE
    assert models.show("tiny").template == "{{ .Prompt }}"
    assert models.show("chat").capabilities == models.show("tiny").capabilities
