"""Binder: ``binder/postBuild`` installs a working service and ``binder/start`` fits it in 2 GB."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID
from tests.conftest import stop_server
from tests.system.fresh_install import INSTALL_TIMEOUT, FreshInstall, bearer, report, start_jupyter

BINDER_MEMORY = 2 * 1024**3


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set size (``VmHWM``)."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.M)
    assert match is not None, status
    return int(match[1]) * 1024


@pytest.mark.timeout(INSTALL_TIMEOUT + 600)
def test_binder_launch_answers_with_the_default_model_within_2_gb(
    install: FreshInstall, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = install.clone / "binder" / "start"
    server = start_jupyter(install, [start, "jupyter", "server"], tmp_path, "lmsp/v1")
    try:
        with httpx.Client(base_url=server.lmsp, headers=bearer(server), timeout=300) as lmsp:
            answer = lmsp.post(
                "/responses",
                json={
                    "model": BUNDLED_MODEL_ID,
                    "input": "The capital of France is",
                    "temperature": 0,
                    "max_output_tokens": 4,
                },
            )
            model = lmsp.get(f"/models/{BUNDLED_MODEL_ID}").json()
        peak = peak_rss_bytes(server.process.pid)
    finally:
        stop_server(server)
    report(
        capsys,
        f"[binder] postBuild {install.seconds:.0f} s; "
        f"server peak RSS after one answer: {peak / 1024**2:.0f} MiB",
    )
    assert answer.status_code == 200, answer.text
    response = answer.json()
    assert response["status"] in {"completed", "incomplete"}
    assert response["model"] == BUNDLED_MODEL_ID
    assert (model["status"], model["context_length"]) == ("loaded", 4096)
    assert peak < BINDER_MEMORY
