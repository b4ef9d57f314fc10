"""Tests of the llama.cpp layer and the engine's async front, with the bundled Gemma 3 270M model.

Every generation is greedy (temperature 0) and short, so the module runs in a few seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import llama_cpp
import pytest

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog, ModelEntry
from lmsp_jupyter.engine.generation import (
    CancelToken,
    ChatMessage,
    EngineError,
    GenerationDone,
    GenerationEvent,
    Prompt,
    SamplingParams,
    TextDelta,
)
from lmsp_jupyter.engine.guidance import SchemaMatcher
from lmsp_jupyter.engine.llama import LlamaRunner, LlamaTokenizer, no_weight_repacking
from lmsp_jupyter.engine.scheduler import Engine, EngineSettings
from lmsp_jupyter.engine.templates import ChatTemplate, fallback_template

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
def entry() -> ModelEntry:
    return ModelCatalog(include_bundled=True).get(BUNDLED_MODEL_ID)


@pytest.fixture(scope="module")
def tokenizer(entry: ModelEntry) -> Iterator[LlamaTokenizer]:
    tokenizer = LlamaTokenizer(entry.path())
    yield tokenizer
    tokenizer.close()


@pytest.fixture(scope="module")
def runner(entry: ModelEntry) -> LlamaRunner:
    return LlamaRunner(entry.path(), context_size=CONTEXT, threads=THREADS, batch_size=512)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = Engine(EngineSettings(context_size=CONTEXT, threads=THREADS))
    yield engine
    engine.close()


def prompt_of(tokenizer: LlamaTokenizer, text: str) -> Prompt:
    return Prompt(text=text, tokens=tokenizer.tokenize(text))


def run(
    runner: LlamaRunner,
    prompt: Prompt,
    max_tokens: int,
    cancel: CancelToken | None = None,
    on_event: Callable[[GenerationEvent, CancelToken], None] | None = None,
) -> list[GenerationEvent]:
    """Every event ``runner.generate`` emits, greedy."""
    token = cancel or CancelToken()
    events: list[GenerationEvent] = []

    def emit(event: GenerationEvent) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event, token)

    runner.generate(prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0), token, emit)
    return events


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
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    template = ChatTemplate(
        fallback_template(entry.architecture),
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


# --- runner ------------------------------------------------------------------------------------


def test_runner_context_size_is_the_requested_one(runner: LlamaRunner) -> None:
    assert runner.context_size == CONTEXT


def test_generate_at_temperature_0_is_deterministic(
    runner: LlamaRunner, tokenizer: LlamaTokenizer
) -> None:
    first = run(runner, prompt_of(tokenizer, GEMMA_HI), 12)
    again = run(runner, prompt_of(tokenizer, GEMMA_HI), 12)
    other = run(runner, prompt_of(tokenizer, FRANCE), 12)
    after_other = run(runner, prompt_of(tokenizer, GEMMA_HI), 12)
    assert text_of(first) != ""
    assert text_of(other) != text_of(first)
    assert first == again == after_other


def test_generate_stops_at_max_tokens_with_exactly_that_many_tokens(
    runner: LlamaRunner, tokenizer: LlamaTokenizer
) -> None:
    prompt = prompt_of(tokenizer, STORY)
    events = run(runner, prompt, 5)
    assert done_of(events) == GenerationDone(
        reason="max_tokens", prompt_tokens=len(prompt.tokens), output_tokens=5
    )


def test_generate_emits_text_deltas_then_one_generation_done(
    runner: LlamaRunner, tokenizer: LlamaTokenizer
) -> None:
    events = run(runner, prompt_of(tokenizer, STORY), 8)
    assert all(isinstance(event, TextDelta) and event.text for event in events[:-1])
    assert len(events) == 9
    assert text_of(events) == ", there was a girl named Lily."  # weights not repacked


def test_cancel_during_generation_stops_after_the_current_token(
    runner: LlamaRunner, tokenizer: LlamaTokenizer
) -> None:
    def cancel_on_first_delta(event: GenerationEvent, cancel: CancelToken) -> None:
        if isinstance(event, TextDelta):
            cancel.cancel()

    prompt = prompt_of(tokenizer, STORY)
    events = run(runner, prompt, 16, on_event=cancel_on_first_delta)
    assert events == [
        TextDelta(","),
        GenerationDone(reason="cancelled", prompt_tokens=len(prompt.tokens), output_tokens=1),
    ]


def test_token_cancelled_before_start_generates_nothing(
    runner: LlamaRunner, tokenizer: LlamaTokenizer
) -> None:
    cancel = CancelToken()
    cancel.cancel()
    prompt = prompt_of(tokenizer, STORY)
    events = run(runner, prompt, 16, cancel=cancel)
    assert events == [
        GenerationDone(reason="cancelled", prompt_tokens=len(prompt.tokens), output_tokens=0)
    ]


def test_runner_is_usable_after_a_cancelled_generation(
    runner: LlamaRunner, tokenizer: LlamaTokenizer
) -> None:
    def cancel_at_once(event: GenerationEvent, cancel: CancelToken) -> None:
        cancel.cancel()

    prompt = prompt_of(tokenizer, STORY)
    complete = run(runner, prompt, 6)
    run(runner, prompt_of(tokenizer, FRANCE), 16, on_event=cancel_at_once)
    assert run(runner, prompt, 6) == complete


def test_text_deltas_concatenate_to_the_detokenized_output(
    entry: ModelEntry, runner: LlamaRunner, tokenizer: LlamaTokenizer
) -> None:
    prompt = prompt_of(tokenizer, JAPANESE)
    events = run(runner, prompt, 12)
    with no_weight_repacking():
        reference = llama_cpp.Llama(
            model_path=str(entry.path()),
            n_ctx=CONTEXT,
            n_batch=512,
            n_threads=THREADS,
            n_threads_batch=THREADS,
            n_gpu_layers=0,
            verbose=False,
        )
    tokens = list(itertools.islice(reference.generate(prompt.tokens, temp=0.0, reset=True), 12))
    expected = reference.detokenize(tokens).decode("utf-8")
    assert any(ord(char) > 0x7F for char in expected)
    assert text_of(events) == expected
    assert done_of(events).output_tokens == len(tokens) == 12


def test_generate_stops_at_the_requested_context_size(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    small = LlamaRunner(entry.path(), context_size=64, threads=THREADS, batch_size=512)
    prompt = prompt_of(tokenizer, "<bos>" + "one two three four five six seven eight nine ten " * 5)
    assert len(prompt.tokens) == 52
    events = run(small, prompt, 16)
    assert done_of(events) == GenerationDone(
        reason="context_length", prompt_tokens=52, output_tokens=12
    )


def test_unloadable_model_file_raises_engine_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(EngineError, match=r"^broken\.gguf could not be loaded$"):
        LlamaRunner(broken, context_size=CONTEXT, threads=1, batch_size=512)
    with pytest.raises(EngineError, match=r"^the tokenizer of broken\.gguf could not be loaded$"):
        LlamaTokenizer(broken)


# --- engine ------------------------------------------------------------------------------------


async def collect(
    engine: Engine, entry: ModelEntry, prompt: Prompt, max_tokens: int
) -> list[GenerationEvent]:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    return [event async for event in engine.generate(entry, prompt, params, CancelToken())]


class GenerateSpy:
    """Records each ``LlamaRunner.generate``: its start and its ``GenerationDone``, in order.

    The done is recorded before it is passed on, so it is logged before the consumer sees it.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[str, str]] = []
        self.done: list[tuple[str, GenerationDone]] = []
        original = LlamaRunner.generate

        def generate(
            runner: LlamaRunner,
            prompt: Prompt,
            params: SamplingParams,
            cancel: CancelToken,
            emit: Callable[[GenerationEvent], None],
            matcher: SchemaMatcher | None = None,
        ) -> None:
            def spy(event: GenerationEvent) -> None:
                if isinstance(event, GenerationDone):
                    self.log.append(("done", prompt.text))
                    self.done.append((prompt.text, event))
                emit(event)

            self.log.append(("start", prompt.text))
            original(runner, prompt, params, cancel, spy, matcher)

        monkeypatch.setattr(LlamaRunner, "generate", generate)


async def test_engine_render_applies_the_models_template_and_tokenizer(
    engine: Engine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    prompt = await engine.render(entry, [ChatMessage(role="user", content="Hi")])
    assert prompt.text == GEMMA_HI
    assert prompt.tokens == tokenizer.tokenize(GEMMA_HI)


async def test_engine_generate_yields_text_deltas_then_generation_done(
    engine: Engine, entry: ModelEntry, runner: LlamaRunner, tokenizer: LlamaTokenizer
) -> None:
    prompt = await engine.render(entry, [ChatMessage(role="user", content="Hi")])
    events = await collect(engine, entry, prompt, 8)
    assert all(isinstance(event, TextDelta) for event in events[:-1])
    assert done_of(events) == GenerationDone(
        reason="max_tokens", prompt_tokens=len(prompt.tokens), output_tokens=8
    )
    assert events == run(runner, prompt, 8)


async def test_engine_loads_the_model_on_first_generation(entry: ModelEntry) -> None:
    engine = Engine(EngineSettings(context_size=CONTEXT, threads=THREADS))
    try:
        prompt = await engine.render(entry, [ChatMessage(role="user", content="Hi")])
        assert engine.is_loaded(BUNDLED_MODEL_ID) is False
        await collect(engine, entry, prompt, 1)
        assert engine.is_loaded(BUNDLED_MODEL_ID) is True
    finally:
        engine.close()


async def test_breaking_out_of_generate_cancels_the_run(
    engine: Engine, entry: ModelEntry, tokenizer: LlamaTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = GenerateSpy(monkeypatch)
    first, second = prompt_of(tokenizer, STORY), prompt_of(tokenizer, FRANCE)
    cancel = CancelToken()
    # A budget far beyond what runs before the cancellation lands: only a missed
    # cancellation would generate all of it.
    params = SamplingParams(max_tokens=400, temperature=0.0)
    received: list[GenerationEvent] = []
    async for event in engine.generate(entry, first, params, cancel):
        received.append(event)
        break
    assert isinstance(received[0], TextDelta)
    after = await collect(engine, entry, second, 4)
    assert cancel.cancelled
    assert done_of(after) == GenerationDone(
        reason="max_tokens", prompt_tokens=len(second.tokens), output_tokens=4
    )
    assert spy.log == [("start", STORY), ("done", STORY), ("start", FRANCE), ("done", FRANCE)]
    (text, done), _ = spy.done
    assert text == STORY
    assert done.reason == "cancelled"
    assert done.output_tokens < 400


async def test_concurrent_generates_on_one_model_run_one_after_the_other(
    engine: Engine, entry: ModelEntry, tokenizer: LlamaTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    story, france = prompt_of(tokenizer, STORY), prompt_of(tokenizer, FRANCE)
    sequential = [await collect(engine, entry, story, 8), await collect(engine, entry, france, 8)]
    spy = GenerateSpy(monkeypatch)
    concurrent = await asyncio.gather(
        collect(engine, entry, story, 8), collect(engine, entry, france, 8)
    )
    assert list(concurrent) == sequential
    assert spy.log == [("start", STORY), ("done", STORY), ("start", FRANCE), ("done", FRANCE)]


async def test_engine_generate_of_an_unloadable_model_raises_engine_error(
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
    engine = Engine(EngineSettings(context_size=CONTEXT, threads=1))
    try:
        with pytest.raises(EngineError, match=r"^broken\.gguf could not be loaded$"):
            await collect(engine, entry, Prompt(text="x", tokens=[1, 2]), 4)
        with pytest.raises(EngineError, match=r"^the tokenizer of broken\.gguf"):
            await engine.render(entry, [ChatMessage(role="user", content="Hi")])
    finally:
        engine.close()
