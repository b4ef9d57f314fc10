"""Continuous batching with the bundled Gemma 3 270M model: sequences interleave, temperature 0
gives the same text whatever else shares the batch or the cache, prefixes are reused, one
sequence's cancel or stop string touches no other, seeds repeat.

One thread per model here: the result does not depend on it (passes have the sizes that keep
llama.cpp's arithmetic the same, see ``engine/local/llama/``), and a busy test machine runs one
thread far faster.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import pytest

from lmsp_jupyter.engine.catalog import ModelEntry
from lmsp_jupyter.engine.generation import (
    CancelToken,
    GenerationDone,
    GenerationEvent,
    Prompt,
    SamplingParams,
    TextDelta,
)
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer
from lmsp_jupyter.engine.local.passes import (
    BLOCK,
    PASS_MAX,
    UNSTABLE_TAIL,
    block_end,
    block_pass_size,
    decode_pass,
    pass_size,
    reusable,
)
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from tests.engine.conftest import prompt_of

PARALLEL = 8
TOKENS = 6
STORY = "<bos>Once upon a time"
#: The span of Gemma 3's sliding-window attention layers.
SLIDING_WINDOW = 512

SUBJECTS = [
    "the sea",
    "a lighthouse",
    "bread",
    "the moon",
    "a violin",
    "winter",
    "bees",
    "a river",
    "old maps",
    "the desert",
    "a clock",
    "tea",
    "volcanoes",
    "a library",
    "owls",
    "glass",
    "the wind",
    "a bridge",
    "snow",
    "chess",
]
FORMS = ["A poem about {}:", "Q: What do you know about {}?\nA:", "Three facts about {}:\n1."]
#: A preamble long enough that a cached prompt serves more than its last prompt pass.
PREAMBLE = "A notebook of short writing exercises, in plain English.\n\n"
#: 60 varied prompts.
PROMPTS = [f"<bos>{PREAMBLE}{form.format(subject)}" for form in FORMS for subject in SUBJECTS]
GREEDY_8 = SamplingParams(max_tokens=8, temperature=0.0)


def new_engine(parallel: int = PARALLEL) -> LocalEngine:
    return LocalEngine(EngineSettings(context_size=1024, threads=1, parallel=parallel))


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    engine = new_engine()
    yield engine
    engine.close()


async def generate(
    engine: LocalEngine,
    entry: ModelEntry,
    prompt: Prompt,
    params: SamplingParams | None = None,
    cancel: CancelToken | None = None,
    log: list[tuple[str, GenerationEvent]] | None = None,
    started: asyncio.Event | None = None,
) -> tuple[str, GenerationDone]:
    """The text and the final event of one generation (greedy, ``TOKENS`` by default)."""
    params = params or SamplingParams(max_tokens=TOKENS, temperature=0.0)
    text: list[str] = []
    async for event in engine.generate(entry, prompt, params, cancel or CancelToken()):
        if log is not None:
            log.append((prompt.text, event))
        if started is not None:
            started.set()
        if isinstance(event, TextDelta):
            text.append(event.text)
        elif isinstance(event, GenerationDone):
            return "".join(text), event
    raise AssertionError("no GenerationDone")


async def test_a_later_request_streams_before_an_earlier_long_one_ends(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    log: list[tuple[str, GenerationEvent]] = []
    started = asyncio.Event()
    long = generate(
        engine,
        entry,
        prompt_of(tokenizer, STORY),
        SamplingParams(max_tokens=60, temperature=0.0),
        log=log,
        started=started,
    )
    first = asyncio.ensure_future(long)
    await started.wait()
    short = prompt_of(tokenizer, PROMPTS[0])
    await generate(engine, entry, short, log=log)
    await first
    short_first_delta = next(i for i, (text, _) in enumerate(log) if text == short.text)
    long_done = next(
        i for i, (text, e) in enumerate(log) if text == STORY and isinstance(e, GenerationDone)
    )
    assert short_first_delta < long_done


@pytest.mark.timeout(1800)  # 180 generations: minutes on a busy machine
async def test_temperature_0_text_is_the_same_alone_in_a_full_batch_and_on_a_cached_prefix(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    prompts = [prompt_of(tokenizer, text) for text in PROMPTS]
    alone_engine = new_engine(parallel=1)
    try:
        alone = [await generate(alone_engine, entry, prompt) for prompt in prompts]
    finally:
        alone_engine.close()
    batched: list[tuple[str, GenerationDone]] = []
    cached: list[tuple[str, GenerationDone]] = []
    batch_engine = new_engine()
    try:
        for start in range(0, len(prompts), PARALLEL):
            group = prompts[start : start + PARALLEL]
            batched += await asyncio.gather(*(generate(batch_engine, entry, p) for p in group))
            # The same prompts again: each one's slot serves all of it but its last token.
            cached += await asyncio.gather(*(generate(batch_engine, entry, p) for p in group))
    finally:
        batch_engine.close()
    assert len({text for text, _ in alone}) > 10  # the prompts lead to different texts
    assert [text for text, _ in batched] == [text for text, _ in alone]
    assert [text for text, _ in cached] == [text for text, _ in alone]
    assert [done.cached_tokens for _, done in cached] == [len(p.tokens) - 1 for p in prompts]


#: A first turn longer than the sliding window, whose cache is trimmed of its answer.
NOTES = " ".join(f"Note {n}: the {SUBJECTS[n % len(SUBJECTS)]} matters." for n in range(80))


@pytest.mark.parametrize("rendered", [True, False], ids=["chat", "raw text"])
@pytest.mark.parametrize(
    ("question", "follow_up"),
    [("Name a fruit.", "And a vegetable?"), (NOTES, "Which note is first?")],
    ids=["short", "longer than the sliding window"],
)
async def test_a_continued_conversation_reuses_its_cache_and_says_the_same(
    entry: ModelEntry, tokenizer: LlamaTokenizer, question: str, follow_up: str, rendered: bool
) -> None:
    """A chat's follow-up says where its first answer starts (as ``render`` does): its cache
    serves the first turn whole. A raw text that continues one reads its blocks from the
    first turn's last whole block on (``engine/passes.py``). Either says what it says cold."""
    first = prompt_of(
        tokenizer, f"<bos><start_of_turn>user\n{question}<end_of_turn>\n<start_of_turn>model\n"
    )
    warm = new_engine(parallel=2)
    try:
        answer, _ = await generate(warm, entry, first, SamplingParams(12, temperature=0.0))
        follow = prompt_of(
            tokenizer,
            f"{first.text}{answer}<end_of_turn>\n"
            f"<start_of_turn>user\n{follow_up}<end_of_turn>\n<start_of_turn>model\n",
        )
        if rendered:
            follow = dataclasses.replace(follow, stable_until=len(first.tokens))
        reused, reused_done = await generate(warm, entry, follow)
    finally:
        warm.close()
    cold = new_engine(parallel=1)
    try:
        fresh, fresh_done = await generate(cold, entry, follow)
    finally:
        cold.close()
    # The first turn's prompt and (as far as it was read) its answer come from the cache,
    # or, for a raw text, the first turn's blocks and what it read in token passes after.
    if rendered or block_end(len(first.tokens)) == block_end(len(follow.tokens)):
        assert len(first.tokens) < reused_done.cached_tokens < len(first.tokens) + 12
    else:
        assert reused_done.cached_tokens == block_end(len(first.tokens)) > 0
    assert fresh_done.cached_tokens == 0
    assert reused == fresh != ""
    assert reused_done.prompt_tokens == fresh_done.prompt_tokens == len(follow.tokens)


async def test_a_prompt_sharing_only_its_start_with_a_cache_leaves_that_cache_alone(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    """Typing in a cell while an ask starts: the ask shares ``<bos>`` with the completion's
    cache, and takes an empty slot; the next keystroke's completion finds its cache whole."""
    code = prompt_of(tokenizer, "<bos>" + "".join(f"x{n} = {n}\n" for n in range(40)))
    ask = prompt_of(tokenizer, "<bos><start_of_turn>user\nName a fruit.<end_of_turn>\n")
    typed = prompt_of(tokenizer, code.text + "x40 =")
    engine = new_engine(parallel=2)
    try:
        await generate(engine, entry, code, SamplingParams(2, temperature=0.0))
        _, asked = await generate(engine, entry, ask, SamplingParams(2, temperature=0.0))
        _, completed = await generate(engine, entry, typed, SamplingParams(2, temperature=0.0))
    finally:
        engine.close()
    assert asked.cached_tokens <= 1
    assert completed.cached_tokens >= len(code.tokens) - 1


def test_the_long_conversation_is_longer_than_the_sliding_window(
    tokenizer: LlamaTokenizer,
) -> None:
    assert len(tokenizer.tokenize(NOTES)) > SLIDING_WINDOW


async def test_cancelling_one_sequence_leaves_the_others_text_unchanged(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    prompts = [prompt_of(tokenizer, text) for text in PROMPTS[:3]]
    alone = [await generate(engine, entry, prompt) for prompt in prompts]
    cancel = CancelToken()
    log: list[tuple[str, GenerationEvent]] = []

    async def cancelled() -> tuple[str, GenerationDone]:
        params = SamplingParams(max_tokens=400, temperature=0.0)
        async for event in engine.generate(entry, prompt_of(tokenizer, STORY), params, cancel):
            log.append((STORY, event))
            cancel.cancel()
        _, done = log[-1]
        assert isinstance(done, GenerationDone)
        return "", done

    *others, (_, stopped) = await asyncio.gather(
        *(generate(engine, entry, prompt) for prompt in prompts), cancelled()
    )
    assert [text for text, _ in others] == [text for text, _ in alone]
    assert stopped.reason == "cancelled"
    assert stopped.output_tokens < 400


async def test_a_request_cancelled_while_waiting_never_reaches_the_model(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    engine = new_engine(parallel=1)
    try:
        reference, _ = await generate(engine, entry, prompt_of(tokenizer, STORY), GREEDY_8)
        story = asyncio.ensure_future(
            generate(engine, entry, prompt_of(tokenizer, STORY), GREEDY_8)
        )
        cancel = CancelToken()
        waiting = asyncio.ensure_future(
            generate(engine, entry, prompt_of(tokenizer, PROMPTS[1]), cancel=cancel)
        )
        await asyncio.sleep(0)
        cancel.cancel()
        text, done = await waiting
        assert (text, done.reason, done.output_tokens, done.cached_tokens) == (
            "",
            "cancelled",
            0,
            0,
        )
        assert (await story)[0] == reference != ""
    finally:
        engine.close()


def stops_within(pieces: list[str]) -> dict[str, tuple[tuple[str, ...], str]]:
    """Stop sequences for a text that arrived as ``pieces``, and the text each leaves.

    They are cut from the greedy text of this machine's run, not written down: another CPU
    continues the prompt with other words.
    """
    text = "".join(pieces)
    # The first two neighbouring deltas of two or more characters each.
    k = next(i for i in range(len(pieces) - 1) if len(pieces[i]) > 1 and len(pieces[i + 1]) > 1)
    start = len("".join(pieces[:k]))
    split = text[start + 1 : start + len(pieces[k]) + 2]
    several = (pieces[-2], pieces[k + 1])
    # The whole of a delta and then what never follows it: held back, then let go.
    unfinished = pieces[k] + "\x07"
    return {
        "split across two deltas": ((split,), text[: text.index(split)]),
        "the earliest of several": (several, text[: min(map(text.index, several))]),
        "held back, then let go": ((unfinished,), text),
    }


@pytest.mark.parametrize(
    "case", ["split across two deltas", "the earliest of several", "held back, then let go"]
)
async def test_stop_sequences_end_the_text_before_them_and_never_leak(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer, case: str
) -> None:
    log: list[tuple[str, GenerationEvent]] = []
    full, _ = await generate(engine, entry, prompt_of(tokenizer, STORY), GREEDY_8, log=log)
    pieces = [event.text for _, event in log if isinstance(event, TextDelta)]
    assert "".join(pieces) == full
    stop, text = stops_within(pieces)[case]
    params = SamplingParams(max_tokens=8, temperature=0.0, stop=stop)
    log.clear()
    received, done = await generate(engine, entry, prompt_of(tokenizer, STORY), params, log=log)
    assert received == text
    assert done.reason == ("max_tokens" if text == full else "stop")
    for _, event in log:
        if isinstance(event, TextDelta):
            assert not any(s in event.text for s in stop)


async def test_a_seed_repeats_sampling_at_temperature_1(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    prompt = prompt_of(tokenizer, STORY)

    def params(seed: int) -> SamplingParams:
        return SamplingParams(max_tokens=12, temperature=1.0, top_k=0, top_p=1.0, seed=seed)

    first = await generate(engine, entry, prompt, params(7))
    together = await asyncio.gather(*(generate(engine, entry, prompt, params(7)) for _ in range(2)))
    others = [await generate(engine, entry, prompt, params(seed)) for seed in (8, 9, 10)]
    assert [text for text, _ in together] == [first[0], first[0]]
    assert len({first[0], *(text for text, _ in others)}) > 1


async def test_top_k_1_is_greedy_at_any_temperature(
    engine: LocalEngine, entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    params = SamplingParams(max_tokens=8, temperature=1.5, top_k=1, seed=3)
    greedy, _ = await generate(engine, entry, prompt_of(tokenizer, STORY), GREEDY_8)
    text, _ = await generate(engine, entry, prompt_of(tokenizer, STORY), params)
    assert text == greedy != ""


@pytest.mark.parametrize(
    ("ids", "ran"),
    [
        ([0, 1, 2, 3], range(0, 4)),
        (list(range(8)), range(0, 8)),  # one pass: its time grows slower than its tokens
        ([0, 2, 3, 5], range(0, 6)),  # pads for prompts or idle slots between
        ([3], range(3, 4)),  # a lone token alone, however far in: no split attention
        ([0, 7], range(0, 8)),
    ],
)
def test_the_sampled_tokens_are_read_in_one_run_of_consecutive_sequences(
    ids: list[int], ran: range
) -> None:
    assert decode_pass(ids) == ran


@pytest.mark.parametrize(
    ("left", "most", "size"),
    [
        (1, PASS_MAX, 1),
        (PASS_MAX, PASS_MAX, PASS_MAX),
        (PASS_MAX + 1, PASS_MAX, PASS_MAX // 2 + 1),  # even: 25 + 24, not 48 + 1
        (100, 32, 25),  # four passes of 25 within a budget of 32
        (100, 500, 34),  # never more than PASS_MAX
        (5, 0, 1),
    ],
)
def test_a_sequences_tokens_are_read_in_few_even_passes(left: int, most: int, size: int) -> None:
    assert pass_size(left, most) == size


@pytest.mark.parametrize(
    ("length", "stable_until", "end"),
    [
        (BLOCK - 1, None, 0),  # a short prompt is read in token passes only
        (BLOCK + UNSTABLE_TAIL - 1, None, 0),
        (BLOCK + UNSTABLE_TAIL, None, BLOCK),
        (1900, None, 1856),  # whole blocks; the last 44 tokens in token passes
        (1870, None, 1792),  # at least the last UNSTABLE_TAIL in token passes
        (1900, 700, 640),  # a follow-up: its first turn's blocks, as they were read then
        (1900, 0, 0),
    ],
)
def test_a_prompt_is_read_in_blocks_up_to_its_stable_part_s_end(
    length: int, stable_until: int | None, end: int
) -> None:
    assert block_end(length, stable_until) == end


@pytest.mark.parametrize(
    ("shared", "cached_blocks", "blocks", "kept"),
    [
        (1899, 1856, 1856, 1899),  # the same prompt again, or a follow-up: all it shares
        (1000, 1856, 1856, 1000),  # a later edit: its blocks from the edit on
        (1830, 1856, 1856, 1856 - BLOCK),  # the blocks left must fill a block pass
        (1899, 1856, 1920, 1856),  # the cache's token passes are blocks of this prompt
        (1899, 1920, 1856, 1856),  # the cache's last block is not the token passes it wants
        (40, 1856, 0, 0),  # a short prompt reads its start in token passes
        (40, 0, 0, 40),
        (1919, 1920, 1920, 1920 - BLOCK),  # the last token is in a block
    ],
)
def test_a_cache_serves_a_prompt_only_where_its_tokens_were_read_in_the_prompts_regime(
    shared: int, cached_blocks: int, blocks: int, kept: int
) -> None:
    assert reusable(shared, cached_blocks, blocks) == kept


@pytest.mark.parametrize(
    ("left", "most", "size"),
    [
        (BLOCK, 32, BLOCK),  # at least a block while others decode
        (2 * BLOCK + 1, 32, BLOCK + 1),  # 65 + 64, never 128 + 1
        (1856, 512, 464),
        (512, 512, 512),
    ],
)
def test_block_passes_are_even_and_each_holds_a_block(left: int, most: int, size: int) -> None:
    assert block_pass_size(left, most) == size
    assert left - size == 0 or left - size >= BLOCK
