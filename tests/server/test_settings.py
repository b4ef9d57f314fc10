"""Settings reach the objects that use them.

The model manager's settings (``ModelManager.keep_alive_seconds``, ...), the local engine's
(``LocalEngine.context_size``, ...), the task store's (``TaskStore.store_url``, ...) and the
router's (``EngineRouter.remote_servers``, ...) are their own traits, as jupyter-server's
contents manager's are. Each test starts a Jupyter server (pytest-jupyter, in this process)
with its own command line.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from traitlets.config import Config

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.worker_inputs import EngineSettings
from lmsp_jupyter.engine.manager import (
    DEFAULT_KEEP_ALIVE_SECONDS,
    DEFAULT_MAX_LOADED_MODELS,
    ModelManager,
    default_memory_budget,
)
from lmsp_jupyter.protocol.environment import MODEL_VARIABLE
from tests.server.helpers import lmsp_app, server_config

SETTINGS = ("keep_alive_seconds", "max_loaded_models", "memory_budget_bytes")
MANAGER = {"keep_alive_seconds": 2000.0, "max_loaded_models": 6, "memory_budget_bytes": 8 * 10**9}


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest) -> Config:
    """The suite's server config without its quick SSE keep-alive: this module sets it."""
    return server_config(request)


def flags(owner: str, values: dict[str, Any]) -> list[str]:
    return [f"--{owner}.{name}={value}" for name, value in values.items()]


def manager_settings(serverapp: Any) -> dict[str, Any]:
    manager = lmsp_app(serverapp).model_manager
    return {name: getattr(manager, name) for name in SETTINGS}


def engine_settings(serverapp: Any) -> EngineSettings:
    local = lmsp_app(serverapp).engine.local
    assert isinstance(local, LocalEngine)
    return local.settings


@pytest.mark.parametrize("jp_argv", [flags("ModelManager", MANAGER)])
def test_the_managers_settings_are_its_own(jp_serverapp: Any) -> None:
    assert manager_settings(jp_serverapp) == MANAGER


def test_unset_the_defaults_are_the_documented_ones(jp_serverapp: Any) -> None:
    assert manager_settings(jp_serverapp) == {
        "keep_alive_seconds": DEFAULT_KEEP_ALIVE_SECONDS,
        "max_loaded_models": DEFAULT_MAX_LOADED_MODELS,
        "memory_budget_bytes": default_memory_budget(),
    }
    assert engine_settings(jp_serverapp) == EngineSettings()


def test_a_manager_without_an_app_has_the_same_defaults() -> None:
    manager = ModelManager(engine=None)  # type: ignore[arg-type]  # never asked to load
    assert {name: getattr(manager, name) for name in SETTINGS} == {
        "keep_alive_seconds": DEFAULT_KEEP_ALIVE_SECONDS,
        "max_loaded_models": DEFAULT_MAX_LOADED_MODELS,
        "memory_budget_bytes": default_memory_budget(),
    }


@pytest.mark.parametrize(
    "jp_argv",
    [
        [
            "--LocalEngine.context_size=1024",
            "--LocalEngine.parallel_requests=3",
            "--LocalEngine.batch_size=64",
            "--LocalEngine.threads=2",
            "--LocalEngine.speculation=False",
        ]
    ],
)
def test_the_engines_settings_are_its_own(jp_serverapp: Any) -> None:
    assert engine_settings(jp_serverapp) == EngineSettings(
        context_size=1024, threads=2, batch_size=64, parallel=3, speculation=False
    )


@pytest.mark.parametrize(
    "jp_argv",
    [
        [
            "--TaskStore.event_retention_seconds=7",
            "--TaskStore.follow_poll_seconds=0.25",
            "--EngineRouter.first_listing_seconds=9",
        ]
    ],
)
def test_the_stores_and_the_routers_settings_are_their_own(jp_serverapp: Any) -> None:
    app = lmsp_app(jp_serverapp)
    assert (app.task_store.event_retention_seconds, app.task_store.follow_poll_seconds) == (7, 0.25)
    assert app.task_service.event_retention_seconds == 7
    assert app.task_service.follow_poll_seconds == 0.25
    assert app.engine.first_listing_seconds == 9


@pytest.mark.parametrize("jp_argv", [["--LmspApp.sse_keepalive_seconds=7"]])
def test_the_sse_keepalive_has_a_name_apart_from_the_models_keep_alive(jp_serverapp: Any) -> None:
    app = lmsp_app(jp_serverapp)
    assert app.sse_keepalive_seconds == 7.0
    assert app.settings["lmsp_keepalive_seconds"] == 7.0
    assert app.model_manager.keep_alive_seconds == DEFAULT_KEEP_ALIVE_SECONDS


@pytest.mark.parametrize(
    ("jp_argv", "keep_alive"), [(["--ModelManager.keep_alive_seconds=1000"], 1000)]
)
async def test_a_loaded_models_expiry_follows_the_keep_alive_set(
    lmsp: httpx.AsyncClient, keep_alive: int
) -> None:
    """The real model, loaded over HTTP, expires ``keep_alive`` seconds after its last use."""
    loaded = await lmsp.post(f"/models/{quote(BUNDLED_MODEL_ID, safe='')}/load")
    assert loaded.status_code == 200, loaded.text
    model = loaded.json()
    assert model["status"] == "loaded"
    # Its last use ended just after it loaded (a loaded machine may take a while; not 1000 s).
    assert keep_alive <= model["expires_at"] - model["loaded_at"] < keep_alive + 100


@pytest.fixture
def stale_model_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``$LMSP_MODEL`` inherited from elsewhere, restored after the test."""
    monkeypatch.setenv(MODEL_VARIABLE, "inherited")


@pytest.mark.parametrize("jp_argv", [["--LmspApp.default_model=chat/model:7b"]])
def test_the_default_model_is_exported_to_the_kernels_the_server_starts(
    stale_model_variable: None, jp_serverapp: Any
) -> None:
    assert os.environ[MODEL_VARIABLE] == "chat/model:7b"


def test_without_a_default_model_none_is_exported(
    stale_model_variable: None, jp_serverapp: Any
) -> None:
    assert lmsp_app(jp_serverapp).default_model == ""
    assert MODEL_VARIABLE not in os.environ  # the magic picks the first loaded model
