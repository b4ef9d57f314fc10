"""Settings reach the objects that use them: the model manager's, spelt either way.

``LmspApp.keep_alive_seconds`` (and ``max_loaded_models``, ``memory_budget_bytes``) are the
user-facing settings; the model manager's traits of the same name default to them, and one set
on the manager itself wins, as jupyter-server's ``FileContentsManager.root_dir`` defaults to
``ServerApp.root_dir``. Each test starts a Jupyter server (pytest-jupyter, in this process) with
its own command line.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from lmsp_jupyter.client import MODEL_VARIABLE
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID
from lmsp_jupyter.engine.manager import (
    DEFAULT_KEEP_ALIVE_SECONDS,
    DEFAULT_MAX_LOADED_MODELS,
    ModelManager,
    default_memory_budget,
)
from tests.server.helpers import lmsp_app

SETTINGS = ("keep_alive_seconds", "max_loaded_models", "memory_budget_bytes")
APP = {"keep_alive_seconds": 1000.0, "max_loaded_models": 5, "memory_budget_bytes": 7 * 10**9}
MANAGER = {"keep_alive_seconds": 2000.0, "max_loaded_models": 6, "memory_budget_bytes": 8 * 10**9}


def flags(owner: str, values: dict[str, Any]) -> list[str]:
    return [f"--{owner}.{name}={value}" for name, value in values.items()]


def manager_settings(serverapp: Any) -> dict[str, Any]:
    manager = lmsp_app(serverapp).model_manager
    return {name: getattr(manager, name) for name in SETTINGS}


@pytest.mark.parametrize("jp_argv", [flags("LmspApp", APP)])
def test_the_apps_settings_reach_the_manager(jp_serverapp: Any) -> None:
    assert manager_settings(jp_serverapp) == APP
    assert {name: getattr(lmsp_app(jp_serverapp), name) for name in SETTINGS} == APP


@pytest.mark.parametrize("jp_argv", [flags("ModelManager", MANAGER)])
def test_the_managers_own_settings_work_alone(jp_serverapp: Any) -> None:
    assert manager_settings(jp_serverapp) == MANAGER


@pytest.mark.parametrize("jp_argv", [flags("LmspApp", APP) + flags("ModelManager", MANAGER)])
def test_the_managers_own_settings_win_over_the_apps(jp_serverapp: Any) -> None:
    assert manager_settings(jp_serverapp) == MANAGER


@pytest.mark.parametrize(
    "jp_argv", [["--LmspApp.keep_alive_seconds=1000", "--ModelManager.max_loaded_models=6"]]
)
def test_each_setting_comes_from_where_it_is_set(jp_serverapp: Any) -> None:
    assert manager_settings(jp_serverapp) == {
        "keep_alive_seconds": 1000.0,
        "max_loaded_models": 6,
        "memory_budget_bytes": default_memory_budget(),
    }


def test_unset_the_defaults_are_the_documented_ones(jp_serverapp: Any) -> None:
    assert manager_settings(jp_serverapp) == {
        "keep_alive_seconds": DEFAULT_KEEP_ALIVE_SECONDS,
        "max_loaded_models": DEFAULT_MAX_LOADED_MODELS,
        "memory_budget_bytes": default_memory_budget(),
    }


def test_a_manager_without_an_app_has_the_same_defaults() -> None:
    manager = ModelManager(engine=None)  # type: ignore[arg-type]  # never asked to load
    assert {name: getattr(manager, name) for name in SETTINGS} == {
        "keep_alive_seconds": DEFAULT_KEEP_ALIVE_SECONDS,
        "max_loaded_models": DEFAULT_MAX_LOADED_MODELS,
        "memory_budget_bytes": default_memory_budget(),
    }


@pytest.mark.parametrize(
    ("jp_argv", "keep_alive"),
    [
        (["--LmspApp.keep_alive_seconds=1000"], 1000),
        (["--LmspApp.keep_alive_seconds=1000", "--ModelManager.keep_alive_seconds=2000"], 2000),
    ],
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
