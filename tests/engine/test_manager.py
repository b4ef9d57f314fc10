"""Which models stay in memory, with the real engine and two (three) real models.

The bundled GGUF and copies of it under other names in a model directory are distinct models
to the catalog and to llama.cpp: each load maps its own file and allocates its own context.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog, ModelEntry
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from lmsp_jupyter.engine.manager import RETRY_AFTER_SECONDS, ModelManager
from lmsp_jupyter.engine.memory import resident_bytes
from lmsp_jupyter.protocol.errors import LmspError
from tests.helpers import eventually_async

THREADS = min(os.cpu_count() or 1, 4)
CONTEXT = 512
COPIES = ("gemma-copy", "gemma-third")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, bundled_model_path: Path) -> Path:
    """A model directory holding two copies of the bundled GGUF under other names."""
    directory = tmp_path_factory.mktemp("models")
    for name in COPIES:
        shutil.copyfile(bundled_model_path, directory / f"{name}.gguf")
    return directory


@pytest.fixture(scope="module")
def models(model_dir: Path) -> tuple[ModelEntry, ModelEntry, ModelEntry]:
    catalog = ModelCatalog(model_dirs=[model_dir])
    first, second, third = (catalog.get(i) for i in (BUNDLED_MODEL_ID, *COPIES))
    return first, second, third


@pytest.fixture
def engine() -> Iterator[LocalEngine]:
    engine = LocalEngine(EngineSettings(context_size=CONTEXT, threads=THREADS))
    yield engine
    engine.close()


def manager(engine: LocalEngine, **traits: Any) -> ModelManager:
    """A manager logging to ``lmsp-test-manager`` (for ``caplog``)."""
    return ModelManager(engine, log=logging.getLogger("lmsp-test-manager"), **traits)


@pytest.fixture
def room_for_one(engine: LocalEngine, models: tuple[ModelEntry, ...]) -> ModelManager:
    """A manager whose memory budget holds one of the models, each kept until it must go."""
    budget = int(1.5 * engine.footprint(models[0]))
    return manager(engine, keep_alive_seconds=-1, memory_budget_bytes=budget)


async def wait_for(check: Callable[[], bool], what: str, limit: float = 120) -> None:
    """Poll ``check`` until true; fail saying ``what`` (a bound for a broken build, not a
    timing claim)."""

    async def checked() -> bool:
        return check()

    await eventually_async(checked, within=limit, what=what)


async def test_an_idle_model_is_unloaded_after_its_keep_alive_and_its_memory_returned(
    engine: LocalEngine, models: tuple[ModelEntry, ...]
) -> None:
    first = models[0]
    models_manager = manager(engine, keep_alive_seconds=0.5)
    before = resident_bytes()

    await models_manager.load(first)
    loaded = resident_bytes()
    state = models_manager.state(first.id)
    assert state is not None and state.status == "loaded"
    assert engine.is_loaded(first.id)
    assert loaded - before >= first.weights_bytes

    await wait_for(lambda: models_manager.state(first.id) is None, "the idle unload")
    after = resident_bytes()
    assert engine.is_loaded(first.id) is False
    assert loaded - after >= first.weights_bytes


async def test_the_state_moves_from_loading_to_loaded_with_memory_and_expiry(
    engine: LocalEngine, models: tuple[ModelEntry, ...]
) -> None:
    first = models[0]
    models_manager = manager(engine, keep_alive_seconds=120)
    assert models_manager.state(first.id) is None

    loading = asyncio.create_task(models_manager.load(first))
    await wait_for(lambda: models_manager.state(first.id) is not None, "the load to start")
    state = models_manager.state(first.id)
    assert state is not None
    assert (state.status, state.loaded_at) == ("loading", None)
    assert state.memory_bytes == engine.footprint(first)
    # The weights, and a cache of CONTEXT tokens for each parallel sequence.
    sequences = engine.settings.parallel
    assert (
        state.memory_bytes == first.weights_bytes + first.kv_bytes_per_token * CONTEXT * sequences
    )

    await loading
    state = models_manager.state(first.id)
    assert state is not None and state.status == "loaded"
    assert state.loaded_at is not None and abs(state.loaded_at - time.time()) < 60
    assert state.expires_at is not None
    assert state.expires_at - state.loaded_at in (119, 120, 121)
    await models_manager.unload(first.id)
    assert models_manager.state(first.id) is None


async def test_the_least_recently_used_idle_model_is_unloaded_when_the_budget_holds_one(
    engine: LocalEngine, models: tuple[ModelEntry, ...], room_for_one: ModelManager
) -> None:
    first, second, _ = models

    await room_for_one.load(first)
    await room_for_one.load(second)
    assert room_for_one.state(first.id) is None
    assert engine.is_loaded(first.id) is False
    assert engine.is_loaded(second.id)

    await room_for_one.load(first)
    assert room_for_one.state(second.id) is None
    assert engine.is_loaded(first.id)
    await room_for_one.close()
    assert engine.is_loaded(first.id) is False


async def test_eviction_takes_the_least_recently_used_not_the_first_loaded(
    engine: LocalEngine, models: tuple[ModelEntry, ...]
) -> None:
    first, second, third = models
    models_manager = manager(engine, keep_alive_seconds=-1, max_loaded_models=2)

    await models_manager.load(first)
    await models_manager.load(second)
    async with models_manager.use(first):  # first is now the more recently used
        pass
    await models_manager.load(third)

    assert [models_manager.state(m.id) is not None for m in models] == [True, False, True]
    await models_manager.close()


async def test_a_model_in_use_is_never_unloaded_and_the_other_gets_overloaded(
    engine: LocalEngine, models: tuple[ModelEntry, ...], room_for_one: ModelManager
) -> None:
    first, second, _ = models

    async with room_for_one.use(first):
        with pytest.raises(LmspError) as refused:
            room_for_one.check(second)
        assert refused.value.code == "overloaded"
        assert refused.value.retry_after == RETRY_AFTER_SECONDS
        detail = str(refused.value.detail)
        assert f"model '{second.id}' needs about {engine.footprint(second) / 1e6:,.0f} MB" in detail
        assert f"loaded: '{first.id}' ({engine.footprint(first) / 1e6:,.0f} MB, in use)" in detail
        with pytest.raises(LmspError) as also_refused:
            async with room_for_one.use(second):
                pass
        assert also_refused.value.code == "overloaded"
        with pytest.raises(LmspError) as busy:
            await room_for_one.unload(first.id)
        assert busy.value.code == "model_busy"
        assert engine.is_loaded(first.id)

    await room_for_one.load(second)  # idle now: the first makes room
    assert room_for_one.state(first.id) is None
    assert engine.is_loaded(second.id)
    await room_for_one.close()


async def test_a_model_bigger_than_the_budget_is_refused_before_anything_is_unloaded(
    engine: LocalEngine, models: tuple[ModelEntry, ...]
) -> None:
    first, second, _ = models
    models_manager = manager(engine, keep_alive_seconds=-1)
    await models_manager.load(first)
    models_manager.memory_budget_bytes = engine.footprint(second) - 1

    with pytest.raises(LmspError) as refused:
        await models_manager.load(second)
    assert refused.value.code == "overloaded"
    assert engine.is_loaded(first.id)
    await models_manager.close()


async def test_keep_alive_zero_unloads_as_soon_as_idle_and_a_request_may_set_it(
    engine: LocalEngine, models: tuple[ModelEntry, ...]
) -> None:
    first = models[0]
    models_manager = manager(engine, keep_alive_seconds=-1)

    await models_manager.load(first)
    state = models_manager.state(first.id)
    assert state is not None and state.expires_at is None  # never, while idle

    async with models_manager.use(first, keep_alive=0):
        assert engine.is_loaded(first.id)
    await wait_for(lambda: models_manager.state(first.id) is None, "the unload at idle")
    assert engine.is_loaded(first.id) is False


async def test_concurrent_first_uses_load_the_model_once(
    engine: LocalEngine, models: tuple[ModelEntry, ...], caplog: pytest.LogCaptureFixture
) -> None:
    first = models[0]
    models_manager = manager(engine, keep_alive_seconds=-1)
    caplog.set_level(logging.INFO, logger="lmsp-test-manager")

    await asyncio.gather(*(models_manager.load(first) for _ in range(3)))

    loads = [r.getMessage() for r in caplog.records if r.getMessage().startswith("loaded model")]
    assert len(loads) == 1, loads
    await models_manager.close()


async def test_unloading_a_model_that_is_not_loaded_does_nothing(
    engine: LocalEngine, models: tuple[ModelEntry, ...]
) -> None:
    models_manager = manager(engine)
    await models_manager.unload(models[1].id)
    assert models_manager.state(models[1].id) is None
