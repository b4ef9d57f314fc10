"""The bundled model's catalog entry and tokenizer, shared by the engine tests that use them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog, ModelEntry
from lmsp_jupyter.engine.generation import Prompt, TokenLogprob
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer


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


#: How far a logprob may move between pass shapes on a build the engine calls inexact
#: (llama.cpp without AVX2: the last bits of the logits depend on the pass).
INEXACT_LOGPROB_TOLERANCE = 1e-3

#: One run's text and the logprobs of its tokens.
Run = tuple[str, Sequence[TokenLogprob]]


def assert_same_runs(actual: Sequence[Run], expected: Sequence[Run], inexact: str | None) -> None:
    """Each run equals ``expected``'s: the same text and logprobs. On a build the engine calls
    ``inexact`` (llama.cpp without AVX2) it promises neither, and the differences of the last
    bits grow with every token read; there the first tokens, drawn from the prompts alone, are
    the same with logprobs within ``INEXACT_LOGPROB_TOLERANCE``."""
    assert len(actual) == len(expected)
    if inexact is None:
        assert [(text, list(lps)) for text, lps in actual] == [
            (text, list(lps)) for text, lps in expected
        ]
        return
    firsts = [(lps[0].token, [a for a, _ in lps[0].top]) for _, lps in actual]
    assert firsts == [(lps[0].token, [a for a, _ in lps[0].top]) for _, lps in expected]
    assert [_values(lps[:1]) for _, lps in actual] == [
        pytest.approx(_values(lps[:1]), abs=INEXACT_LOGPROB_TOLERANCE) for _, lps in expected
    ]


def _values(run: Sequence[TokenLogprob]) -> list[float]:
    """Every logprob of ``run``: each token's and its alternatives'."""
    return [v for t in run for v in (t.logprob, *(lp for _, lp in t.top))]
