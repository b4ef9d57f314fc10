"""``LmspApp.model_dirs`` as users type it: a JSON list, one path, the option repeated, a string."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from lmsp_jupyter.server.app import LmspApp, PathList

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
