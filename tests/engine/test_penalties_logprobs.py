"""Repetition penalties and token logprobs with the bundled Gemma 3 270M model: penalties break
a loop, logprobs describe the distribution each token was drawn from, and both are the same
alone and batched (compared within the run, never with text fixed here)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pytest

from lmsp_jupyter.engine.catalog import ModelEntry
from lmsp_jupyter.engine.generation import (
    CancelToken,
    GenerationDone,
    SamplingParams,
    TextDelta,
    TokenLogprob,
)
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from tests.engine.conftest import assert_same_runs, prompt_of

#: A prompt a base model continues by repeating itself at temperature 0.
LOOPING = "<bos>red, green, blue, red, green, blue, red, green, blue, red, green, blue,"
PROMPTS = [
    LOOPING,
    "<bos>Once upon a time",
    "<bos>def fibonacci(n):\n",
    "<bos>Q: What is the capital of France?\nA:",
]
TOKENS = 40


def new_engine(parallel: int) -> LocalEngine:
    return LocalEngine(EngineSettings(context_size=512, threads=1, parallel=parallel))


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    engine = new_engine(parallel=len(PROMPTS))
    yield engine
    engine.close()


async def generate(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer, text: str, **params: object
) -> tuple[str, tuple[TokenLogprob, ...], GenerationDone]:
    """The text, the logprobs and the final event of one greedy generation."""
    sampling = SamplingParams(max_tokens=TOKENS, temperature=0.0, **params)  # type: ignore[arg-type]
    pieces: list[str] = []
    logprobs: list[TokenLogprob] = []
    async for event in engine.generate(entry, prompt_of(tokenizer, text), sampling, CancelToken()):
        if isinstance(event, TextDelta):
            pieces.append(event.text)
            logprobs += event.logprobs
        elif isinstance(event, GenerationDone):
            return "".join(pieces), tuple(logprobs), event
    raise AssertionError("no GenerationDone")


def repeated_trigrams(text: str) -> int:
    """How many word trigrams of ``text`` repeat an earlier one."""
    words = text.split()
    trigrams = list(zip(words, words[1:], words[2:], strict=False))
    return len(trigrams) - len(set(trigrams))


async def test_a_frequency_penalty_breaks_a_loop_at_temperature_0(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    plain, _, _ = await generate(engine, entry, tokenizer, LOOPING)
    penalized, _, _ = await generate(engine, entry, tokenizer, LOOPING, frequency_penalty=1.5)
    assert repeated_trigrams(plain) > 0  # the prompt loops without a penalty
    assert repeated_trigrams(penalized) < repeated_trigrams(plain)


async def test_penalties_and_logprobs_are_the_same_alone_batched_and_cached(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    params = {"frequency_penalty": 1.0, "presence_penalty": 0.5, "top_logprobs": 5}
    alone_engine = new_engine(parallel=1)
    try:
        alone = [await generate(alone_engine, entry, tokenizer, p, **params) for p in PROMPTS]
    finally:
        alone_engine.close()
    batched = await asyncio.gather(
        *(generate(engine, entry, tokenizer, p, **params) for p in PROMPTS)
    )
    # The same prompts again: each one's slot serves all of it but its last token.
    cached = await asyncio.gather(
        *(generate(engine, entry, tokenizer, p, **params) for p in PROMPTS)
    )
    assert len({text for text, _, _ in alone}) == len(PROMPTS)
    inexact = engine.inexact(entry)
    expected = [(text, logprobs) for text, logprobs, _ in alone]
    assert_same_runs([(text, logprobs) for text, logprobs, _ in batched], expected, inexact)
    assert_same_runs([(text, logprobs) for text, logprobs, _ in cached], expected, inexact)
    assert all(done.cached_tokens > 0 for _, _, done in cached)


async def test_logprobs_describe_the_greedy_draw(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    text, logprobs, done = await generate(engine, entry, tokenizer, PROMPTS[1], top_logprobs=5)
    assert len(logprobs) == done.output_tokens
    assert b"".join(entry.token for entry in logprobs).decode() == text
    for item in logprobs:
        assert len(item.top) == 5
        assert item.top[0] == (item.token, item.logprob)  # greedy: the most likely token
        assert all(logprob <= 0 for _, logprob in item.top)
        assert [lp for _, lp in item.top] == sorted((lp for _, lp in item.top), reverse=True)
        assert math.fsum(math.exp(lp) for _, lp in item.top) <= 1 + 1e-9
    without, none, _ = await generate(engine, entry, tokenizer, PROMPTS[1])
    assert without == text and none == ()  # asked for nothing, the same text, no logprobs


async def test_logprobs_with_0_alternatives_and_penalties_keep_the_chosen_tokens(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    """Logprobs are of the penalized distribution: the greedy token is still its top one."""
    _, logprobs, _ = await generate(
        engine, entry, tokenizer, LOOPING, frequency_penalty=1.5, top_logprobs=1
    )
    assert all(item.top[0][0] == item.token for item in logprobs)
    _, bare, _ = await generate(engine, entry, tokenizer, LOOPING, top_logprobs=0)
    assert bare and all(item.top == () and item.logprob <= 0 for item in bare)


async def test_under_a_schema_logprobs_are_masked_and_forced_tokens_certain(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    schema = {
        "type": "object",
        "properties": {"colour": {"enum": ["red", "green", "blue"]}},
        "required": ["colour"],
    }
    text, logprobs, _ = await generate(
        engine, entry, tokenizer, PROMPTS[3], schema=schema, top_logprobs=3
    )
    assert b"".join(item.token for item in logprobs).decode() == text
    assert any(item.logprob == 0.0 and item.top == ((item.token, 0.0),) for item in logprobs)
    assert all(item.top[0][0] == item.token for item in logprobs)
