"""Tests of the llama.cpp layer and the engine's async front, with the bundled Gemma 3 270M model.

Every generation is greedy (temperature 0) and short, so the module runs in a few seconds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelEntry
from lmsp_jupyter.engine.generation import (
    CancelToken,
    ChatMessage,
    GenerationDone,
    GenerationEvent,
    ModelLoadError,
    Prompt,
    SamplingParams,
    TextDelta,
)
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.llama.model import BatchToken, LlamaModel
from lmsp_jupyter.engine.local.llama.runtime import output_tile
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from lmsp_jupyter.engine.templates import ChatTemplate
from tests.chat_template import GEMMA_TEMPLATE
from tests.engine.conftest import prompt_of

THREADS = min(os.cpu_count() or 1, 4)
CONTEXT = 512
BOS_ID = 2
START_OF_TURN_ID = 105
END_OF_TURN_ID = 106
GEMMA_HI = "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
STORY = "<bos>Once upon a time"
FRANCE = "<bos>Q: What is the capital of France?\nA: Paris"
JAPANESE = "<bos>日本語の文章：私は"


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    engine = LocalEngine(EngineSettings(context_size=CONTEXT, threads=THREADS))
    yield engine
    engine.close()


def text_of(events: list[GenerationEvent]) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


def done_of(events: list[GenerationEvent]) -> GenerationDone:
    assert isinstance(events[-1], GenerationDone)
    assert sum(isinstance(event, GenerationDone) for event in events) == 1
    return events[-1]


# --- tokenizer ---------------------------------------------------------------------------------


def test_tokenizer_reads_bos_and_eos_tokens(tokenizer: LlamaTokenizer) -> None:
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<bos>", "<eos>")


def test_rendered_gemma_prompt_starts_with_bos_and_has_start_of_turn_as_one_token(
    tokenizer: LlamaTokenizer,
) -> None:
    template = ChatTemplate(
        GEMMA_TEMPLATE,
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
    )
    tokens = tokenizer.tokenize(template.render([ChatMessage(role="user", content="Hi")]))
    assert tokens[:2] == [BOS_ID, START_OF_TURN_ID]
    assert tokens.count(START_OF_TURN_ID) == 2
    assert tokens.count(END_OF_TURN_ID) == 1
    assert tokens == [2, 105, 2364, 107, 10979, 106, 107, 105, 4368, 107]


def test_tokenize_adds_no_bos_of_its_own(tokenizer: LlamaTokenizer) -> None:
    assert tokenizer.tokenize("Hi") == [10979]
    assert tokenizer.tokenize("") == []


# --- sampler -----------------------------------------------------------------------------------


def test_greedy_sampler_picks_what_llama_cpps_greedy_sampler_picks(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    """At temperature 0 the engine takes the logits' argmax itself; llama.cpp's greedy sampler
    must agree on every row of a real pass, and on equal maxima (the first one wins)."""
    tokens = tokenizer.tokenize(FRANCE + " is a city of art, and its river is the Seine.")
    model = LlamaModel(entry.path(), cells=128, sequences=1, threads=THREADS)
    reference = llama_cpp.llama_sampler_init_greedy()
    sampler = model.sampler(SamplingParams(max_tokens=1, temperature=0.0))
    try:
        model.decode([BatchToken(t, p, 0, True) for p, t in enumerate(tokens)])
        ours = [sampler.next(row)[0] for row in range(len(tokens))]
        theirs = [
            llama_cpp.llama_sampler_sample(reference, model._ctx, row) for row in range(len(tokens))
        ]
        assert ours == theirs
        assert len(set(ours)) > 3  # the rows do differ
        logits = model.logits(0)
        top = float(np.max(logits))
        logits[[7, 2024, 9000]] = top + 1.0  # three equal maxima
        assert sampler.next(0) == [7]
        assert llama_cpp.llama_sampler_sample(reference, model._ctx, 0) == 7
    finally:
        llama_cpp.llama_sampler_free(reference)
        sampler.close()
        model.close()


# --- engine ------------------------------------------------------------------------------------


async def collect(
    engine: LocalEngine, entry: ModelEntry, prompt: Prompt, max_tokens: int
) -> list[GenerationEvent]:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    return [event async for event in engine.generate(entry, prompt, params, CancelToken())]


async def test_engine_render_applies_a_chat_models_template_and_tokenizer(
    engine: LocalEngine, chat_entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    prompt = await engine.render(chat_entry, [ChatMessage(role="user", content="Hi")])
    assert prompt.text == GEMMA_HI
    assert prompt.tokens == tokenizer.tokenize(GEMMA_HI)
    assert prompt.stable_until is None  # a first turn: no answer yet


async def test_engine_render_gives_a_base_model_the_raw_prompt_of_the_text(
    engine: LocalEngine, entry: ModelEntry
) -> None:
    prompt = await engine.render(entry, [ChatMessage(role="user", content="Hi")])
    assert prompt == await engine.render_text(entry, "Hi")
    assert (prompt.text, prompt.tokens, prompt.raw) == ("Hi", [BOS_ID, 10979], True)


@pytest.mark.parametrize("kind", ["base", "chat"])
async def test_a_rendered_follow_up_says_where_its_first_answer_starts(
    engine: LocalEngine, entry: ModelEntry, chat_entry: ModelEntry, kind: str
) -> None:
    model = entry if kind == "base" else chat_entry
    first = [ChatMessage(role="user", content="Hi")]
    follow = [*first, ChatMessage("assistant", " there!"), ChatMessage("user", "And you?")]
    asked = await engine.render(model, first)
    prompt = await engine.render(model, follow)
    # The first turn's prompt, as it was answered: the follow-up reads it as it was read then.
    assert prompt.stable_until == len(asked.tokens)
    assert prompt.tokens[: len(asked.tokens)] == asked.tokens
    if kind == "base":  # the transcript: the answer goes on from its prompt, a turn starts a line
        assert prompt == replace(
            await engine.render_text(model, "Hi there!\nAnd you?"), stable_until=len(asked.tokens)
        )


async def test_engine_loads_the_model_on_first_generation(entry: ModelEntry) -> None:
    engine = LocalEngine(EngineSettings(context_size=CONTEXT, threads=THREADS))
    try:
        prompt = await engine.render(entry, [ChatMessage(role="user", content="Hi")])
        assert engine.is_loaded(BUNDLED_MODEL_ID) is False
        await collect(engine, entry, prompt, 1)
        assert engine.is_loaded(BUNDLED_MODEL_ID) is True
    finally:
        engine.close()


async def test_breaking_out_of_generate_cancels_the_run(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    cancel = CancelToken()
    # A budget far beyond what runs before the cancellation lands: only a missed
    # cancellation would generate all of it.
    params = SamplingParams(max_tokens=400, temperature=0.0)
    received: list[GenerationEvent] = []
    async for event in engine.generate(entry, prompt_of(tokenizer, STORY), params, cancel):
        received.append(event)
        break
    assert isinstance(received[0], TextDelta)
    second = prompt_of(tokenizer, FRANCE)
    after = await collect(engine, entry, second, 4)
    assert cancel.cancelled  # once the abandoned generator is finalized
    assert done_of(after).reason == "max_tokens"
    assert done_of(after).output_tokens == 4


async def test_token_cancelled_before_start_generates_nothing(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    cancel = CancelToken()
    cancel.cancel()
    prompt = prompt_of(tokenizer, STORY)
    params = SamplingParams(max_tokens=16, temperature=0.0)
    events = [event async for event in engine.generate(entry, prompt, params, cancel)]
    assert events == [
        GenerationDone(reason="cancelled", prompt_tokens=len(prompt.tokens), output_tokens=0)
    ]


async def test_cancel_after_the_first_delta_ends_cancelled_with_the_text_so_far(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    cancel = CancelToken()
    prompt = prompt_of(tokenizer, STORY)
    uncancelled = text_of(await collect(engine, entry, prompt, 16))
    params = SamplingParams(max_tokens=400, temperature=0.0)
    events: list[GenerationEvent] = []
    async for event in engine.generate(entry, prompt, params, cancel):
        events.append(event)
        cancel.cancel()
    done = done_of(events)
    assert done.reason == "cancelled"
    assert 1 <= done.output_tokens < 400
    assert uncancelled.startswith(text_of(events))


async def test_generate_at_temperature_0_is_deterministic(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    hi, france = prompt_of(tokenizer, GEMMA_HI), prompt_of(tokenizer, FRANCE)
    first = await collect(engine, entry, hi, 12)
    again = await collect(engine, entry, hi, 12)
    other = await collect(engine, entry, france, 12)
    after_other = await collect(engine, entry, hi, 12)
    assert text_of(first) != ""
    assert text_of(other) != text_of(first)
    assert text_of(first) == text_of(again) == text_of(after_other)


async def test_generate_emits_text_deltas_then_one_generation_done_with_exactly_max_tokens(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    prompt = prompt_of(tokenizer, STORY)
    events = await collect(engine, entry, prompt, 8)
    assert all(isinstance(event, TextDelta) and event.text for event in events[:-1])
    assert len(events) == 9
    # The same greedy tokens begin a longer answer to the same prompt.
    longer = text_of(await collect(engine, entry, prompt, 16))
    assert longer.startswith(text_of(events))
    done = done_of(events)
    assert (done.reason, done.prompt_tokens, done.output_tokens) == (
        "max_tokens",
        len(prompt.tokens),
        8,
    )


async def test_multibyte_text_arrives_whole(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    events = await collect(engine, entry, prompt_of(tokenizer, JAPANESE), 12)
    text = text_of(events)
    assert any(ord(char) > 0x7F for char in text)
    assert "\ufffd" not in text
    assert done_of(events).output_tokens == 12


async def test_generate_stops_at_the_context_size(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    small = LocalEngine(EngineSettings(context_size=64, threads=THREADS, parallel=2))
    try:
        prompt = prompt_of(
            tokenizer, "<bos>" + "one two three four five six seven eight nine ten " * 5
        )
        assert len(prompt.tokens) == 52
        events = await collect(small, entry, prompt, 16)
        done = done_of(events)
        assert (done.reason, done.output_tokens) == ("context_length", 12)
    finally:
        small.close()


async def test_engine_generate_of_an_unloadable_model_raises_model_load_error(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(64))
    entry = ModelEntry(
        id="broken",
        source="directory",
        size_bytes=68,
        context_length=2048,
        architecture="llama",
        chat_template=None,
        location=broken,
    )
    engine = LocalEngine(EngineSettings(context_size=CONTEXT, threads=1))
    try:
        with pytest.raises(ModelLoadError, match=r"^broken\.gguf could not be loaded$"):
            await collect(engine, entry, Prompt(text="x", tokens=[1, 2]), 4)
        with pytest.raises(ModelLoadError, match=r"^the tokenizer of broken\.gguf"):
            await engine.render(entry, [ChatMessage(role="user", content="Hi")])
    finally:
        engine.close()


def test_the_output_tile_is_the_kernels_for_8_bit_outputs_and_1_for_others(
    entry: ModelEntry,
) -> None:
    features = llama_cpp.llama_print_system_info().decode()
    expected = 4 if "AVX512 = 1" in features else 2 if "AVX = 1" in features else 1
    if "LLAMAFILE = 1" not in features:
        expected = 1
    assert output_tile(8) == expected  # Q8_0, the bundled model's tied output layer
    assert output_tile(14) == output_tile(None) == 1  # Q6_K: not computed in tiles
    model = LlamaModel(entry.path(), cells=256, sequences=1, threads=2)
    try:
        assert model.output_tile == expected
    finally:
        model.close()
