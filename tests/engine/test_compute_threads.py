"""llama.cpp's compute threads (OpenMP's team of the thread that runs a pass) are let go when
a model's thread goes idle, so that a model which ran once does not slow the others down
(``release_compute_threads``; ``benchmarks/idle_models.py`` measures what it is worth)."""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor

import llama_cpp
import pytest

from lmsp_jupyter.engine.catalog import ModelEntry
from lmsp_jupyter.engine.generation import CancelToken, GenerationDone, SamplingParams
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.llama.embedder import LlamaEmbedder
from lmsp_jupyter.engine.local.llama.model import BatchToken, LlamaModel
from lmsp_jupyter.engine.local.llama.runtime import release_compute_threads
from lmsp_jupyter.engine.local.llama.tokenizer import LlamaTokenizer
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from tests.engine.conftest import prompt_of

pytestmark = pytest.mark.skipif(
    "OPENMP = 1" not in llama_cpp.llama_print_system_info().decode(),
    reason="llama.cpp built without OpenMP keeps no compute threads between passes",
)


def os_threads() -> int:
    """The threads of this process, Python's and native ones."""
    return len(os.listdir("/proc/self/task"))


def test_a_thread_that_ran_passes_keeps_its_team_until_it_lets_it_go(entry: ModelEntry) -> None:
    with ThreadPoolExecutor(1) as thread:
        model = thread.submit(LlamaModel, entry.path(), cells=256, sequences=1, threads=2).result()
        try:
            before = os_threads()
            thread.submit(model.decode, [BatchToken(2, 0, 0, True)]).result()
            kept = os_threads()
            thread.submit(release_compute_threads).result()
            released = os_threads()
        finally:
            thread.submit(model.close).result()
    assert kept == before + 1  # a team of two: the thread and one more
    assert released == before


async def test_the_engine_lets_its_team_go_when_its_model_is_idle(
    entry: ModelEntry, tokenizer: LlamaTokenizer
) -> None:
    engine = LocalEngine(EngineSettings(context_size=256, threads=2, parallel=1))
    try:
        await engine.load(entry)
        before = os_threads()
        params = SamplingParams(max_tokens=4, temperature=0.0)
        prompt = prompt_of(tokenizer, "<bos>Once upon a time")
        events = [e async for e in engine.generate(entry, prompt, params, CancelToken())]
        assert isinstance(events[-1], GenerationDone)
        for _ in range(600):  # the worker goes idle right after the last pass: 30 s at most
            if os_threads() == before:
                break
            await asyncio.sleep(0.05)
        assert os_threads() == before
    finally:
        engine.close()


def test_the_embedder_lets_its_team_go_after_each_call(entry: ModelEntry) -> None:
    with ThreadPoolExecutor(1) as thread:
        embedder = thread.submit(LlamaEmbedder, entry.path(), "mean", 256, 2).result()
        try:
            before = os_threads()
            vectors, _ = thread.submit(embedder.embed, ["The cat sat on the mat."]).result()
            after = os_threads()
        finally:
            thread.submit(embedder.close).result()
    assert len(vectors) == 1
    assert after == before
