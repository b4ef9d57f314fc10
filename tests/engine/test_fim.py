"""Fill-in-the-middle: FIM tokens read from GGUF metadata, and raw prompts assembled from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsp_jupyter.engine.catalog import ModelCatalog, ModelEntry
from lmsp_jupyter.engine.fim import FIM_KEYS, FimTokens, fim_tokens, raw_prompt_tokens
from lmsp_jupyter.engine.generation import CancelToken, GenerationDone, SamplingParams, TextDelta
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from tests.conftest import FIM_IDS
from tests.engine.gguf_files import INT32, Typed, write_gguf

FIM = FimTokens(*FIM_IDS)


def words(text: str) -> list[int]:
    """A made-up tokenizer: one token a word, its length."""
    return [len(word) for word in text.split()]


def test_fim_tokens_are_read_when_the_metadata_names_all_three() -> None:
    assert fim_tokens(dict(zip(FIM_KEYS, (1, 2, 3), strict=True))) == FimTokens(1, 2, 3)


@pytest.mark.parametrize(
    "values",
    [
        {},
        {FIM_KEYS[0]: 1, FIM_KEYS[1]: 2},  # no middle token
        {FIM_KEYS[0]: 1, FIM_KEYS[1]: 2, FIM_KEYS[2]: -1},  # llama.cpp's "none"
        {FIM_KEYS[0]: 1, FIM_KEYS[1]: True, FIM_KEYS[2]: 3},
        {FIM_KEYS[0]: 1, FIM_KEYS[1]: "2", FIM_KEYS[2]: 3},
    ],
)
def test_fim_tokens_are_none_unless_all_three_are_token_ids(values: dict[str, object]) -> None:
    assert fim_tokens(values) is None


def test_a_suffix_with_fim_tokens_is_prefix_suffix_middle_after_bos() -> None:
    tokens = raw_prompt_tokens(words, "def f(x):", "return y", bos=2, fim=FIM)
    assert tokens == [2, FIM.prefix, 3, 5, FIM.suffix, 6, 1, FIM.middle]


def test_an_empty_suffix_still_fills_in_the_middle() -> None:
    tokens = raw_prompt_tokens(words, "a bb", "", bos=None, fim=FIM)
    assert tokens == [FIM.prefix, 1, 2, FIM.suffix, FIM.middle]


@pytest.mark.parametrize("suffix", [None, "after"])
def test_without_fim_tokens_the_prompt_alone_is_continued(suffix: str | None) -> None:
    assert raw_prompt_tokens(words, "a bb", suffix, bos=2, fim=None) == [2, 1, 2]


def test_without_a_suffix_a_fim_model_continues_the_prompt() -> None:
    assert raw_prompt_tokens(words, "a bb", None, bos=None, fim=FIM) == [1, 2]


def test_the_catalog_lists_a_gguf_with_fim_tokens_with_them(tmp_path: Path) -> None:
    fim = {key: Typed(INT32, value) for key, value in zip(FIM_KEYS, (5, 6, 7), strict=True)}
    write_gguf(tmp_path / "coder.gguf", {"general.architecture": "llama", **fim})
    write_gguf(tmp_path / "plain.gguf", {"general.architecture": "llama"})
    entries = {e.id: e for e in ModelCatalog(model_dirs=[tmp_path], include_bundled=False).list()}
    assert entries["coder"].fim == FimTokens(5, 6, 7)
    assert entries["plain"].fim is None


@pytest.fixture(scope="module")
def fim_entry(fim_model_path: Path) -> ModelEntry:
    (entry,) = ModelCatalog(model_dirs=[fim_model_path.parent], include_bundled=False).list()
    return entry


async def test_the_engine_fills_in_the_middle_with_the_models_tokens(
    fim_entry: ModelEntry, fim_model_path: Path
) -> None:
    tokenizer = LlamaTokenizer(fim_model_path)
    engine = LocalEngine(EngineSettings(context_size=512, parallel=1, threads=2))
    try:
        prefix, suffix = "def fibonacci(n):\n    ", "\n    return a\n"
        prompt = await engine.render_text(fim_entry, prefix, suffix)
        assert prompt.raw
        assert prompt.tokens == [
            tokenizer.bos,
            FIM.prefix,
            *tokenizer.tokenize(prefix),
            FIM.suffix,
            *tokenizer.tokenize(suffix),
            FIM.middle,
        ]
        # The text after the gap is read in token passes: the next keystroke changes it.
        assert prompt.stable_until == prompt.tokens.index(FIM.suffix)
        events = [
            event
            async for event in engine.generate(
                fim_entry, prompt, SamplingParams(max_tokens=4, temperature=0), CancelToken()
            )
        ]
        assert isinstance(events[-1], GenerationDone)
        assert events[-1].prompt_tokens == len(prompt.tokens)
        assert all(isinstance(event, TextDelta) for event in events[:-1])
    finally:
        engine.close()
        tokenizer.close()


async def test_the_engine_continues_the_prompt_alone_for_a_model_without_fim(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    engine = LocalEngine(EngineSettings(context_size=512, parallel=1, threads=2))
    try:
        prompt = await engine.render_text(entry, "import numpy as", "\nprint(np)")
        assert prompt.tokens == [tokenizer.bos, *tokenizer.tokenize("import numpy as")]
        assert prompt.stable_until is None  # the gap is at the end
    finally:
        engine.close()
