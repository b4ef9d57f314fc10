"""Speculation with the bundled model: drafts (from the context, or a caller's prediction) change
how many positions a pass reads, never the text, greedy or seeded, alone, batched or cached."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from lmsp_jupyter.engine.catalog import ModelEntry
from lmsp_jupyter.engine.generation import (
    GenerationDone,
    GenerationEvent,
    SamplingParams,
    TextDelta,
    TokenLogprob,
)
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer
from lmsp_jupyter.engine.local.speculation import (
    Draft,
    Drafter,
    expected_accepted,
    left_over_ms,
    own_pass_ms,
)
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from tests.engine.conftest import assert_same_runs, prompt_of
from tests.engine.test_batching import PREAMBLE, PROMPTS, SUBJECTS, generate

PARALLEL = 8
TOKENS = 20
#: Prompts whose answers repeat their context: a line said twice (a base model says it a third
#: time), a numbered list started again, and some of the free-form prompts.
COPYING = [
    f"<bos>{PREAMBLE}Copy each line exactly.\n{line}\n{line}\n"
    for line in (
        f"The {SUBJECTS[n]} and the {SUBJECTS[n + 3]} met by the {SUBJECTS[n + 7]}."
        for n in range(8)
    )
]
LISTS = [
    f"<bos>{PREAMBLE}"
    + "".join(f"{n + 1}. {SUBJECTS[(start + n) % len(SUBJECTS)]}\n" for n in range(6))
    + "\nThe list again:\n1."
    for start in (0, 5, 10, 15)
]
SPECULATING = [*COPYING, *LISTS, *PROMPTS[::15]]


def new_engine(parallel: int, speculation: bool = True) -> LocalEngine:
    settings = EngineSettings(
        context_size=1024, threads=1, parallel=parallel, speculation=speculation
    )
    return LocalEngine(settings)


GREEDY = SamplingParams(max_tokens=TOKENS, temperature=0.0)


def seeded(index: int) -> SamplingParams:
    return SamplingParams(max_tokens=TOKENS, temperature=0.8, seed=100 + index)


@pytest.mark.timeout(1800)  # some 200 generations: minutes on a busy machine
@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
async def test_text_is_the_same_with_speculation_on_or_off_alone_batched_and_cached(
    entry: ModelEntry, tokenizer: LlamaTokenizer, sampling: str
) -> None:
    prompts = [prompt_of(tokenizer, text) for text in SPECULATING]
    params = [GREEDY if sampling == "greedy" else seeded(i) for i in range(len(prompts))]

    async def alone(speculation: bool) -> list[tuple[str, GenerationDone]]:
        engine = new_engine(1, speculation)
        try:
            return [
                await generate(engine, entry, p, s) for p, s in zip(prompts, params, strict=True)
            ]
        finally:
            engine.close()

    off = await alone(False)
    on = await alone(True)
    # Predictions, right (even prompts) and wrong from half way (odd ones: their own answer's
    # first half, then another prompt's answer), make sequences draft beside other streams.
    answers = [text for text, _ in off]
    predicted = [
        replace(
            p,
            prediction=answers[i]
            if i % 2 == 0
            else answers[i][: len(answers[i]) // 2] + answers[(i + 1) % len(answers)],
        )
        for i, p in enumerate(params)
    ]
    requests = list(zip(prompts, predicted, strict=True))
    paired: list[tuple[str, GenerationDone]] = []
    batched: list[tuple[str, GenerationDone]] = []
    cached: list[tuple[str, GenerationDone]] = []
    engine = new_engine(2)
    try:
        # Two streams: a prediction pays for its own pass whenever the drafter's record is its
        # prior, whichever the other stream is doing; beside 8, a sequence drafts only while
        # fewer are decoding (as the prompts happen to be admitted).
        for start in range(0, len(prompts), 2):
            group = requests[start : start + 2]
            paired += await asyncio.gather(*(generate(engine, entry, p, s) for p, s in group))
    finally:
        engine.close()
    engine = new_engine(PARALLEL)
    try:
        for start in range(0, len(prompts), PARALLEL):
            group = requests[start : start + PARALLEL]
            batched += await asyncio.gather(*(generate(engine, entry, p, s) for p, s in group))
            cached += await asyncio.gather(*(generate(engine, entry, p, s) for p, s in group))
    finally:
        engine.close()
    assert len(set(answers)) > 5
    for run in (on, paired, batched, cached):
        assert [text for text, _ in run] == answers
    assert [done.output_tokens for _, done in on] == [done.output_tokens for _, done in off]
    assert all(done.accepted_draft_tokens == 0 for _, done in off)
    accepted = sum(done.accepted_draft_tokens for _, done in on)
    assert accepted > len(prompts)  # drafts were verified and kept
    assert sum(done.accepted_prediction_tokens for _, done in paired) > len(prompts)
    assert sum(done.rejected_prediction_tokens for _, done in paired) > 0
    for _, done in on + paired + batched + cached:
        assert done.accepted_draft_tokens < done.output_tokens


async def test_a_prediction_equal_to_the_answer_is_accepted_whole_and_a_wrong_one_costs_no_text(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    prompt = prompt_of(tokenizer, PROMPTS[4])
    params = SamplingParams(max_tokens=24, temperature=0.0, speculation=False)
    engine = new_engine(2)
    try:
        answer, plain = await generate(engine, entry, prompt, params)
        right = SamplingParams(max_tokens=24, temperature=0.0, prediction=answer)
        predicted, done = await generate(engine, entry, prompt, right)
        wrong = SamplingParams(
            max_tokens=24, temperature=0.0, prediction="Zebra quantum 4711 marmalade " * 4
        )
        mispredicted, missed = await generate(engine, entry, prompt, wrong)
    finally:
        engine.close()
    assert predicted == mispredicted == answer
    assert plain.accepted_draft_tokens == plain.accepted_prediction_tokens == 0
    assert done.output_tokens == plain.output_tokens
    # None was refused; the first token comes from the prompt's pass, and each pass samples
    # one token after its draft.
    assert done.rejected_prediction_tokens == 0
    assert done.output_tokens * 3 // 4 <= done.accepted_prediction_tokens < done.output_tokens
    assert missed.accepted_prediction_tokens == 0


async def test_a_request_may_turn_speculation_off(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    prompt = prompt_of(tokenizer, LISTS[0])
    engine = new_engine(1)
    try:
        on = await generate(engine, entry, prompt, GREEDY)
        off_params = SamplingParams(max_tokens=TOKENS, temperature=0.0, speculation=False)
        off = await generate(engine, entry, prompt, off_params)
    finally:
        engine.close()
    assert on[0] == off[0]
    assert on[1].accepted_draft_tokens > 0
    assert off[1].accepted_draft_tokens == 0


async def test_penalties_and_logprobs_are_the_same_with_speculation_on_or_off(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    """Each verified position is drawn with the penalties of the tokens before it, so drafts
    change neither the text nor the logprobs of a penalized request."""
    prompts = [prompt_of(tokenizer, text) for text in (*COPYING[:3], LISTS[0])]

    async def run(
        engine: LocalEngine, params: SamplingParams, prompt_index: int
    ) -> tuple[str, GenerationDone, list[TokenLogprob]]:
        log: list[tuple[str, GenerationEvent]] = []
        text, done = await generate(engine, entry, prompts[prompt_index], params, log=log)
        logprobs = [lp for _, e in log if isinstance(e, TextDelta) for lp in e.logprobs]
        return text, done, logprobs

    penalized = SamplingParams(
        max_tokens=TOKENS,
        temperature=0.0,
        frequency_penalty=0.8,
        presence_penalty=0.5,
        top_logprobs=3,
    )
    engine = new_engine(1)
    try:
        off = [await run(engine, replace(penalized, speculation=False), i) for i in range(4)]
        # The answer as its own prediction: every position of it is drafted and verified.
        on = [
            await run(engine, replace(penalized, prediction=text), i)
            for i, (text, _, _) in enumerate(off)
        ]
    finally:
        engine.close()
    inexact = engine.inexact(entry)
    assert_same_runs([(t, lps) for t, _, lps in on], [(t, lps) for t, _, lps in off], inexact)
    assert all(len(lps) == done.output_tokens for _, done, lps in off)
    assert sum(done.accepted_prediction_tokens for _, done, _ in on) > len(prompts)


#: A JSON answer with free strings between the keys and brackets its schema forces.
LIST_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "items": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["title", "items"],
}


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
async def test_a_schema_constrained_answer_is_the_same_with_drafts_and_keeps_them(
    entry: ModelEntry, tokenizer: LlamaTokenizer, sampling: str
) -> None:
    """Each verified position is drawn under the matcher as it stands after the positions
    before it: the same JSON with speculation on or off, and drafts kept between the tokens
    the schema forces."""
    prompts = [prompt_of(tokenizer, text) for text in (LISTS[0], COPYING[1])]
    base = GREEDY if sampling == "greedy" else seeded(0)
    params = replace(base, max_tokens=40, schema=LIST_SCHEMA)
    engine = new_engine(2)
    try:
        off = [
            await generate(engine, entry, p, replace(params, speculation=False)) for p in prompts
        ]
        on = [await generate(engine, entry, p, params) for p in prompts]
        # The answer as its own prediction: every free position of it is drafted.
        predicted = [
            await generate(engine, entry, p, replace(params, prediction=text))
            for p, (text, _) in zip(prompts, off, strict=True)
        ]
    finally:
        engine.close()
    assert [text for text, _ in on] == [text for text, _ in off]
    assert [text for text, _ in predicted] == [text for text, _ in off]
    assert all(text.lstrip().startswith("{") for text, _ in off)  # the schema held
    assert [done.output_tokens for _, done in predicted] == [done.output_tokens for _, done in off]
    assert sum(done.accepted_prediction_tokens for _, done in predicted) > 0
    assert all(done.accepted_draft_tokens == 0 for _, done in off)


def test_a_context_draft_is_what_followed_the_latest_earlier_occurrence_of_the_last_tokens() -> (
    None
):
    tokens = [1, 2, 3, 4, 9, 1, 2, 3, 4, 8, 7, 5, 2, 3, 4]
    draft = Drafter(tokens).draft(3)
    assert draft == Draft([8, 7, 5], from_prediction=False)
    tokens.append(6)  # "3 4 6" never came before, "4 6" neither, "6" neither
    assert Drafter(tokens).draft(3) is None


def test_a_prediction_drafts_where_the_answer_is_and_realigns_after_a_detour() -> None:
    tokens = [50, 51, 52]  # the prompt
    drafter = Drafter(tokens, prediction=[10, 11, 12, 13, 14, 15, 16, 17])
    tokens.append(10)  # the first token of the answer
    assert drafter.draft(2) == Draft([11, 12], from_prediction=True)
    tokens += [11, 12, 99, 98]  # the answer leaves the prediction...
    assert drafter.draft(4) is None
    tokens += [14, 15]  # ... and comes back to it
    assert drafter.draft(4) == Draft([16, 17], from_prediction=True)


@pytest.mark.parametrize(
    ("rate", "sharing", "drafts"),
    [
        (0.9, 1, True),  # alone, a likely draft is nearly free
        (0.05, 1, False),  # alone, drafts that always fail are not tried
        (0.5, 8, False),  # among 8 streams, a pass of its own costs more than a coin toss wins
        (0.98, 4, True),
    ],
)
def test_a_sequence_drafts_only_when_its_acceptance_pays_for_the_pass(
    rate: float, sharing: int, drafts: bool
) -> None:
    drafter = Drafter([1, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 1, 2])
    drafter.rates[False] = rate
    draft = drafter.draft(16)
    assert draft is not None
    assert (drafter.size(draft, sharing) > 0) is drafts


def test_expected_accepted_tokens_stop_at_the_first_miss() -> None:
    assert expected_accepted(1.0, 5) == 5
    assert expected_accepted(0.5, 2) == 0.75


async def test_a_stop_string_inside_an_accepted_draft_ends_where_it_would_without_drafts(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    prompt = prompt_of(tokenizer, COPYING[0])
    engines = {spec: new_engine(1, spec) for spec in (False, True)}
    try:
        full, _ = await generate(engines[False], entry, prompt, GREEDY)
        stop = full[len(full) // 2 : len(full) // 2 + 3]  # from the answer's second half
        params = SamplingParams(max_tokens=TOKENS, temperature=0.0, stop=(stop,))
        off, off_done = await generate(engines[False], entry, prompt, params)
        on, on_done = await generate(engines[True], entry, prompt, params)
    finally:
        for engine in engines.values():
            engine.close()
    assert stop.strip() and stop not in on
    assert on == off == full[: full.index(stop)]
    assert (on_done.reason, on_done.output_tokens) == (off_done.reason, off_done.output_tokens)
    assert on_done.reason == "stop"
    assert on_done.accepted_draft_tokens > 0


def test_left_over_rows_cost_a_pass_only_past_its_first_tile() -> None:
    assert left_over_ms(5, 4) > 0 and left_over_ms(3, 2) > 0
    assert left_over_ms(8, 4) == left_over_ms(3, 4) == left_over_ms(4, 2) == 0
    assert all(left_over_ms(rows, 1) == 0 for rows in range(1, 49))
    assert own_pass_ms(4, 4) > own_pass_ms(7, 4)  # 5 rows sweep the output layer twice, 8 once


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("rate", [0.6, 0.8, 0.9, 0.97])
def test_a_verification_fills_the_kernels_last_tile_when_its_draft_has_the_tokens(
    tile: int, rate: float
) -> None:
    tokens = list(range(40)) * 2  # the second copy drafts the first's next 47 tokens
    sizes = {}
    for kernel_tile in (1, tile):
        drafter = Drafter(tokens, tile=kernel_tile)
        drafter.rates[False] = rate
        draft = drafter.draft(47)
        assert draft is not None and len(draft.tokens) == 40
        sizes[kernel_tile] = drafter.size(draft, 1)
    plain, tiled = sizes[1], sizes[tile]
    assert plain > 0
    assert (1 + tiled) % tile == 0 or 1 + tiled <= tile
    assert plain <= tiled < plain + tile  # up to the next whole tile, never shorter


def test_a_draft_too_short_to_fill_a_tile_keeps_its_rows_or_drops_the_left_over() -> None:
    draft = Draft([5, 6, 7, 8, 9, 10], from_prediction=False)  # 7 rows at most: no 8
    for rate in (0.3, 0.6, 0.9, 0.99):
        plain, tiled = (Drafter([1, 2, 3], tile=tile) for tile in (1, 4))
        plain.rates[False] = tiled.rates[False] = rate
        alone, whole = plain.size(draft, 1), tiled.size(draft, 1)
        assert whole == alone or (alone > 3 and whole == 3)
        if rate == 0.9:
            assert (alone, whole) == (6, 3)  # 4 rows in one sweep beat 7 in two
