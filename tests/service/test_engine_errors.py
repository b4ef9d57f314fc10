"""The one mapping of engine failures to LMSP problems (9.3)."""

from __future__ import annotations

import pytest

from lmsp_jupyter.engine.generation import EngineError, EngineUnavailable, ModelLoadError
from lmsp_jupyter.service.engine_errors import RETRY_UNAVAILABLE_SECONDS, engine_problem


@pytest.mark.parametrize(
    ("error", "code", "status", "retry_after"),
    [
        (
            EngineUnavailable("remote server 'gpu' does not answer"),
            "engine_unavailable",
            503,
            RETRY_UNAVAILABLE_SECONDS,
        ),
        (ModelLoadError("x.gguf could not be loaded"), "engine_unavailable", 503, None),
        (EngineError("llama.cpp failed to evaluate a batch"), "generation_failed", 500, None),
    ],
    ids=["a server that does not answer", "a model that cannot load", "a failed generation"],
)
def test_an_engine_failure_is_its_problem_with_retry_after_where_trying_again_helps(
    error: EngineError, code: str, status: int, retry_after: int | None
) -> None:
    problem = engine_problem(error)
    assert (problem.code, problem.status, problem.retry_after) == (code, status, retry_after)
    assert problem.detail == str(error)
