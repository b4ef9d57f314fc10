"""Prompts read in block passes (llama.cpp's fast kernels) with the bundled model: their text
and logprobs at temperature 0 are the same cold, batched beside streams that decode, from the
cache, after an edit in their middle and at whole blocks (compared within the run, never with
text fixed here); ``engine/local/passes.py`` says why."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from lmsp_jupyter.engine.catalog import ModelEntry
from lmsp_jupyter.engine.generation import (
    CancelToken,
    GenerationDone,
    Prompt,
    SamplingParams,
    TextDelta,
    TokenLogprob,
)
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer
from lmsp_jupyter.engine.local.passes import BLOCK, block_end
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from tests.engine.conftest import assert_same_runs, prompt_of

TOKENS = 12
SUBJECTS = ["the sea", "a lighthouse", "bread", "a violin", "snow", "chess", "a river", "owls"]
Run = tuple[str, tuple[TokenLogprob, ...]]


def notes(count: int, changed: int | None = None) -> str:
    """A text of ``count`` notes; note ``changed`` says something else."""
    lines = [
        f"Note {n}: {'nothing' if n == changed else SUBJECTS[n % len(SUBJECTS)]} matters."
        for n in range(count)
    ]
    return "<bos>" + " ".join(lines) + " The note that matters most is"


def new_engine(parallel: int) -> LocalEngine:
    return LocalEngine(EngineSettings(context_size=1024, threads=1, parallel=parallel))


async def generate(engine: LocalEngine, entry: ModelEntry, prompt: Prompt) -> tuple[Run, int]:
    """The text and logprobs of one greedy generation, and how many prompt tokens were cached."""
    params = SamplingParams(max_tokens=TOKENS, temperature=0.0, top_logprobs=3)
    pieces: list[str] = []
    logprobs: list[TokenLogprob] = []
    async for event in engine.generate(entry, prompt, params, CancelToken()):
        if isinstance(event, TextDelta):
            pieces.append(event.text)
            logprobs += event.logprobs
        elif isinstance(event, GenerationDone):
            return ("".join(pieces), tuple(logprobs)), event.cached_tokens
    raise AssertionError("no GenerationDone")


async def cold(entry: ModelEntry, prompt: Prompt) -> Run:
    """``prompt`` read by an engine of its own, with nothing cached."""
    engine = new_engine(parallel=1)
    try:
        run, cached = await generate(engine, entry, prompt)
    finally:
        engine.close()
    assert cached == 0
    return run


def cut(tokenizer: LlamaTokenizer, text: str, length: int, changed: int | None = None) -> Prompt:
    """``text``'s first ``length`` tokens, the one at ``changed`` another one."""
    tokens = tokenizer.tokenize(text)[:length]
    if changed is not None:
        tokens[changed] = tokens[changed] + 1
    return Prompt(text=text, tokens=tokens)


@pytest.mark.timeout(900)
async def test_prompts_read_in_blocks_say_the_same_cold_batched_cached_and_after_an_edit(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    long = prompt_of(tokenizer, notes(60))
    edited = prompt_of(tokenizer, notes(60, changed=30))  # shares about half of ``long``
    longer = prompt_of(tokenizer, notes(64))  # ``long`` and a block more, and its blocks
    exact = cut(tokenizer, notes(60), 5 * BLOCK)  # its last block ends where its tail starts
    near = cut(tokenizer, notes(60), 5 * BLOCK, changed=4 * BLOCK - 6)  # 6 before its blocks end
    short = prompt_of(tokenizer, "<bos>Once upon a time")
    prompts = [long, edited, longer, exact, near, short]
    assert block_end(len(long.tokens)) >= 4 * BLOCK and block_end(len(short.tokens)) == 0
    expected = [await cold(entry, prompt) for prompt in prompts]
    engine = new_engine(parallel=4)
    try:
        # Block passes beside streams that decode: the short prompt and the long ones at once.
        batched = await asyncio.gather(
            *(generate(engine, entry, p) for p in [short, long, exact, longer])
        )
        again = await asyncio.gather(*(generate(engine, entry, p) for p in [long, exact, short]))
        after_edit = await generate(engine, entry, edited)
        after_near = await generate(engine, entry, near)
    finally:
        engine.close()
    inexact = engine.inexact(entry)
    by_prompt = dict(zip([id(p) for p in prompts], expected, strict=True))
    ran = [short, long, exact, longer, long, exact, short, edited, near]
    runs = [run for run, _ in [*batched, *again, after_edit, after_near]]
    assert_same_runs(runs, [by_prompt[id(p)] for p in ran], inexact)
    assert len({text for text, _ in expected}) > 1
    cached = [tokens for _, tokens in [*again, after_edit, after_near]]
    assert [cached[0], cached[1], cached[2]] == [len(p.tokens) - 1 for p in [long, exact, short]]
    assert 0 < cached[3] < len(edited.tokens) // 2 + BLOCK  # up to the edit, and no block more
    # What is left of its blocks after the change must fill a block pass: a block is read again.
    assert cached[4] == block_end(len(near.tokens)) - BLOCK


async def test_a_chat_follow_up_finds_its_first_turn_in_the_cache_and_says_the_same(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    """The first turn's prompt was read in blocks up to its last whole block and in token passes
    after it, its answer decoded in token passes; the follow-up, which says where its first
    answer starts, reads them the same way cold."""
    first = prompt_of(tokenizer, notes(60) + "\n")
    engine = new_engine(parallel=1)
    try:
        (answer, _), _ = await generate(engine, entry, first)
        text = f"{first.text}{answer}\nAnd the one that matters least is"
        follow = dataclasses.replace(prompt_of(tokenizer, text), stable_until=len(first.tokens))
        reused, cached = await generate(engine, entry, follow)
    finally:
        engine.close()
    assert cached > len(first.tokens)
    assert_same_runs([reused], [await cold(entry, follow)], engine.inexact(entry))


async def test_a_prompt_that_extends_a_cached_one_by_blocks_reads_from_its_last_block(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    """The cached prompt's end was read in token passes, where the longer prompt has blocks:
    the cache serves its blocks only."""
    long = prompt_of(tokenizer, notes(60))
    longer = prompt_of(tokenizer, notes(80))  # blocks from where ``long`` was read in passes
    assert block_end(len(long.tokens)) + 2 * BLOCK < block_end(len(longer.tokens))
    engine = new_engine(parallel=1)
    try:
        await generate(engine, entry, long)
        run, cached = await generate(engine, entry, longer)
    finally:
        engine.close()
    assert_same_runs([run], [await cold(entry, longer)], engine.inexact(entry))
    assert cached == block_end(len(long.tokens))
