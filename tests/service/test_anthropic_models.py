"""The model names of Anthropic's Messages API: a model's own id, ``model_map``'s names and
patterns, and any other ``claude-*`` name for the default model."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets.config import Config

from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.service.anthropic import AnthropicModels
from tests.service.test_embedding_models import directory


def anthropic_models(tmp_path: Path, default: str = "", **model_map: str) -> AnthropicModels:
    config = Config({"AnthropicModels": {"model_map": model_map}})
    return AnthropicModels(directory(tmp_path), default, config=config)


def test_a_models_own_id_names_it(tmp_path: Path) -> None:
    assert anthropic_models(tmp_path, **{"tiny": "bge"}).resolve("tiny") == "tiny"


def test_a_claude_name_goes_to_the_first_generation_model_by_default(tmp_path: Path) -> None:
    assert anthropic_models(tmp_path).resolve("claude-sonnet-4-5") == "tiny"


def test_a_claude_name_goes_to_the_configured_default_model(tmp_path: Path) -> None:
    assert anthropic_models(tmp_path, "other").resolve("claude-opus-4-1") == "other"


def test_the_map_takes_names_and_patterns_before_the_default(tmp_path: Path) -> None:
    models = anthropic_models(
        tmp_path, "fallback", **{"claude-*haiku*": "small", "my-alias": "tiny"}
    )
    assert models.resolve("claude-haiku-4-5-20251001") == "small"
    assert models.resolve("my-alias") == "tiny"
    assert models.resolve("claude-sonnet-4-5") == "fallback"


def test_another_name_is_not_found_in_anthropics_words(tmp_path: Path) -> None:
    with pytest.raises(LmspError) as caught:
        anthropic_models(tmp_path).resolve("gpt-4o")
    assert (caught.value.code, caught.value.detail) == ("model_not_found", "model: gpt-4o")


def test_the_listing_has_the_generation_models_and_a_claude_name_shows_its_model(
    tmp_path: Path,
) -> None:
    models = anthropic_models(tmp_path)
    assert [model.id for model in models.listing().data] == ["tiny"]
    shown = models.get("claude-haiku-4-5")
    assert (shown.id, shown.display_name) == (
        "claude-haiku-4-5",
        "claude-haiku-4-5 (local model tiny)",
    )
