"""The edit-a-cell request matches the shared fixture, case by case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lmsp_jupyter.protocol.cell_edit import EDIT_STOP, edit_prediction, edit_prompt, edited_source

FIXTURE = json.loads(
    (Path(__file__).resolve().parent.parent / "fixtures" / "edit_prompt.json").read_text()
)


def test_the_stop_is_the_fixtures() -> None:
    assert FIXTURE["stop"] == EDIT_STOP


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda case: case["instruction"].strip())
def test_prompt_and_prediction_match_the_fixture(case: dict[str, Any]) -> None:
    assert edit_prompt(case["instruction"], case["source"], case["language"]) == case["prompt"]
    assert edit_prediction(case["source"]) == case["prediction"]


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda case: case["instruction"].strip())
def test_the_predicted_continuation_gives_the_old_source_back(case: dict[str, Any]) -> None:
    assert edited_source(case["prediction"]) == case["source"].rstrip("\n")


def test_the_new_source_ends_at_the_fence_without_its_last_newline() -> None:
    assert edited_source("count = 1\nprint(count)\n") == "count = 1\nprint(count)"
    assert edited_source("a\n\n```\ntrailing") == "a\n"
