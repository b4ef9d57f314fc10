"""The bundled model's catalog entry and tokenizer, shared by the engine tests that use them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog, ModelEntry
from lmsp_jupyter.engine.generation import Prompt
from lmsp_jupyter.engine.local.llama import LlamaTokenizer


@pytest.fixture(scope="module")
def entry(bundled_model_path: Path) -> ModelEntry:
    """The bundled model's catalog entry, its GGUF assembled."""
    return ModelCatalog(include_bundled=True).get(BUNDLED_MODEL_ID)


@pytest.fixture(scope="module")
def tokenizer(entry: ModelEntry) -> Iterator[LlamaTokenizer]:
    tokenizer = LlamaTokenizer(entry.path())
    yield tokenizer
    tokenizer.close()


def prompt_of(tokenizer: LlamaTokenizer, text: str) -> Prompt:
    """``text``, a rendered prompt, with its tokens."""
    return Prompt(text=text, tokens=tokenizer.tokenize(text))
