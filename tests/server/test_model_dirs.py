"""``LmspApp.model_dirs`` as users type it: a JSON list, one path, the option repeated, a string.

The command line's values are parsed here, and given to a running server (pytest-jupyter, in
this process, whose ``HOME`` is a temporary directory: ``~/models`` is under it), which lists
the models found and says which configured directory gives none, in its listing and its log.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from traitlets.config import Config

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID
from lmsp_jupyter.server.app import LmspApp, PathList
from tests.engine.gguf_files import write_gguf
from tests.server.helpers import assert_problem

TRAIT = PathList()


@pytest.mark.parametrize(
    ("typed", "paths"),
    [
        (['["~/models"]'], ["~/models"]),  # the README's own example
        (['["/a", "/b"]'], ["/a", "/b"]),
        (["['/a', '/b']"], ["/a", "/b"]),  # Python's quotes
        (["/a"], ["/a"]),
        (["/a", "/b"], ["/a", "/b"]),  # the option repeated
        (["/a", '["/b", "/c"]'], ["/a", "/b", "/c"]),
        (["[not a list"], ["[not a list"]),  # a path that starts with a bracket
    ],
)
def test_command_line_values_become_paths(typed: list[str], paths: list[str]) -> None:
    assert TRAIT.from_string_list(typed) == paths


def test_model_dirs_is_a_path_list() -> None:
    assert isinstance(LmspApp.class_traits()["model_dirs"], PathList)


def test_a_config_file_may_give_one_string_or_a_list() -> None:
    one = LmspApp(config=Config({"LmspApp": {"model_dirs": "~/models"}}))
    many = LmspApp(config=Config({"LmspApp": {"model_dirs": ["/a", "/b"]}}))
    assert (one.model_dirs, many.model_dirs) == (["~/models"], ["/a", "/b"])


# --- on a running server ---------------------------------------------------------------------


@pytest.fixture
def home(jp_home_dir: Path) -> Path:
    """The server's home: ~/models and ~/more hold a (small, header-only) GGUF each, ~/empty
    holds none, and ~/missing does not exist."""
    for name in ("models", "more"):
        metadata = {"general.architecture": "llama", "general.name": name}
        write_gguf(jp_home_dir / name / f"{name}.gguf", {**metadata, "llama.context_length": 512})
    (jp_home_dir / "empty").mkdir()
    (jp_home_dir / "empty" / "notes.txt").write_text("no model here")
    return jp_home_dir


async def listed(client: httpx.AsyncClient) -> tuple[list[str], list[str]]:
    """The ids of the configured directories' models, and the listing's notices."""
    listing = (await client.get("/models")).json()
    ids = [model["id"] for model in listing["data"] if model["id"] != BUNDLED_MODEL_ID]
    notices = (listing.get("extensions") or {}).get("x-lmsp-jupyter", {}).get("notices", [])
    return ids, notices


@pytest.mark.parametrize(
    ("jp_argv", "ids"),
    [
        (['--LmspApp.model_dirs=["~/models"]'], ["models"]),  # the README's own example
        (["--LmspApp.model_dirs=~/models"], ["models"]),
        (['--LmspApp.model_dirs=["~/models", "~/more"]'], ["models", "more"]),
        (["--LmspApp.model_dirs=~/models", "--LmspApp.model_dirs=~/more"], ["models", "more"]),
    ],
    ids=["json-list", "one-path", "json-list-of-two", "repeated"],
)
async def test_a_running_server_finds_the_models_of_directories_typed_any_way(
    home: Path, lmsp: httpx.AsyncClient, ids: list[str]
) -> None:
    assert await listed(lmsp) == (ids, [])


@pytest.mark.parametrize("jp_argv", [['--LmspApp.model_dirs=["~/models", "~/empty", "~/missing"]']])
async def test_a_missing_or_empty_directory_is_said_in_the_listing_and_the_log(
    capfd: pytest.CaptureFixture[str], home: Path, lmsp: httpx.AsyncClient
) -> None:
    notices = [
        f"model directory {home / 'empty'} holds no .gguf model file",
        f"model directory {home / 'missing'} does not exist",
    ]
    assert await listed(lmsp) == (["models"], notices)
    log = capfd.readouterr().err  # the server's log, since before it started
    assert all(f"LmspApp] {notice}\n" in log for notice in notices), log


@pytest.mark.parametrize("jp_argv", [['--LmspApp.model_dirs=["~/models"]']])
async def test_a_model_that_cannot_be_loaded_is_engine_unavailable_and_the_rest_still_serves(
    home: Path, lmsp: httpx.AsyncClient
) -> None:
    # ~/models/models.gguf has metadata and no tensors: listed, but llama.cpp cannot load it.
    load = await lmsp.post("/models/models/load")
    problem = assert_problem(load, 503, "engine_unavailable")
    assert problem["detail"] == "models.gguf could not be loaded"
    assert "retry-after" not in load.headers  # trying again cannot help until the file changes
    asked = await lmsp.post("/responses", json={"model": "models", "input": "Hi"})
    assert_problem(asked, 503, "engine_unavailable")
    assert "retry-after" not in asked.headers
    body = {"model": BUNDLED_MODEL_ID, "input": "Hi", "max_output_tokens": 2}
    assert (await lmsp.post("/responses", json=body)).status_code == 200
