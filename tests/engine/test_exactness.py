"""The engine's exactness does not rest on ``GGML_CPU_TILED_MM``: token passes take llama.cpp's
reference kernels through its CPU backend's switch, block passes its fast ones
(``engine/local/passes.py``), whatever the variable says and whatever ran in the process first.
The engine leaves the variable as it found it, and says, in its log once and in the model
listing, when the text at temperature 0 cannot be exact. llama.cpp reads the variable once per
process, so each case runs in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lmsp_jupyter.engine.local.llama.runtime import without_avx2

#: llama.cpp's switch of its tiled matrix product, read once per process.
VARIABLE = "GGML_CPU_TILED_MM"
#: Imports the engine, makes a ``llama_cpp.Llama`` first if asked, starts two engines, and
#: prints the variable after the start, what the engines say and what the listing says.
SCRIPT = """
import json, logging, os, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
import llama_cpp
from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID, ModelCatalog
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.service.models import ModelDirectory
if sys.argv[1] == "llama-first":
    llama_cpp.Llama(sys.argv[2], vocab_only=True, verbose=False)
catalog = ModelCatalog(include_bundled=True)
entry = catalog.get(BUNDLED_MODEL_ID)
engines = [LocalEngine(), LocalEngine()]
listed = ModelDirectory(catalog, engines[1]).list().model_dump(mode="json")
print(json.dumps({
    "started": os.environ.get("GGML_CPU_TILED_MM"),
    "inexact": [engine.inexact(entry) for engine in engines],
    "extensions": listed["data"][0].get("extensions"),
}))
"""


def started(bundled_model_path: Path, *, variable: str | None, first: str = "") -> dict[str, Any]:
    """What a process started with ``GGML_CPU_TILED_MM`` set to ``variable`` (``None``: unset)
    reports, its warnings under ``warnings``."""
    env = {key: value for key, value in os.environ.items() if key != VARIABLE}
    if variable is not None:
        env[VARIABLE] = variable
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, first, str(bundled_model_path)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    report: dict[str, Any] = json.loads(run.stdout)
    report["warnings"] = [line for line in run.stderr.splitlines() if "not exact" in line]
    return report


def exact_or_not_on_this_build(report: dict[str, Any]) -> None:
    """The report of a process that made llama.cpp exact as far as it can: exact, unless its
    kernels were built without AVX2, which the log and the listing then say."""
    reason = without_avx2()
    assert report["inexact"] == [reason, reason]
    if reason is None:
        assert (report["extensions"], report["warnings"]) == (None, [])
    else:
        assert report["extensions"] == {"x-lmsp-jupyter": {"inexact": reason}}
        assert len(report["warnings"]) == 1


@pytest.mark.parametrize("variable", [None, "0", "1"])
def test_the_engine_is_exact_whatever_the_tiled_product_variable_says_and_leaves_it(
    bundled_model_path: Path, variable: str | None
) -> None:
    report = started(bundled_model_path, variable=variable)
    assert report["started"] == variable
    exact_or_not_on_this_build(report)


def test_a_llama_made_before_the_engine_started_changes_nothing(
    bundled_model_path: Path,
) -> None:
    report = started(bundled_model_path, variable=None, first="llama-first")
    assert report["started"] is None
    exact_or_not_on_this_build(report)
