"""The README's commands and the quickstart notebook work as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import LiveServer

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_readme_has_exactly_two_set_up_commands_and_ci_runs_the_test_one() -> None:
    set_up = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert [block.strip() for block in bash_blocks(set_up)] == ["./scripts/run", "./scripts/test"]
    assert "./scripts/test" in (ROOT / ".ci" / "run").read_text()


@pytest.fixture
def curl_env(live_server: LiveServer) -> dict[str, str]:
    return {**os.environ, "LMSP": live_server.lmsp, "JUPYTER_TOKEN": live_server.token}


def test_readme_curl_examples_work_as_written(curl_env: dict[str, str]) -> None:
    blocks = [b for b in bash_blocks(README) if "curl " in b]
    outputs = [
        subprocess.run(
            ["bash", "-ec", b], env=curl_env, capture_output=True, text=True, timeout=300
        )
        for b in blocks
    ]
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    decoder = json.JSONDecoder()
    service, end = decoder.raw_decode(outputs[0].stdout)
    models, _ = decoder.raw_decode(outputs[0].stdout[end:])
    assert service["object"] == "service" and models["object"] == "list"
    answer = json.loads(outputs[1].stdout)
    assert answer["object"] == "response" and answer["status"] == "incomplete"
    streamed = outputs[2].stdout
    assert streamed.startswith("retry: 2000\n\nid: 1\nevent: response.created\n")
    assert "event: response.incomplete" in streamed or "event: response.completed" in streamed
    task_events = outputs[3].stdout
    assert task_events.count("event: response.created") == 1
    replayed = task_events.split("event: response.created", 1)[1]
    assert "\nid: 4\n" in replayed
    task = json.loads(task_events[task_events.rindex('{"id":"task_') :])
    assert task["status"] == "incomplete"
    city = json.loads(json.loads(outputs[4].stdout)["output"][0]["content"][0]["text"])
    assert set(city) == {"city", "country"}


def test_quickstart_notebook_runs_against_the_server(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = Path(live_server.root_dir).parent / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    notebook = nbformat.read(ROOT / "notebooks" / "quickstart.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    models, answer, stream = (c for c in notebook.cells if c.cell_type == "code")
    assert "gemma3:270m-q4_k_m" in models.outputs[0]["data"]["text/plain"]
    assert "'incomplete'" in answer.outputs[-1]["data"]["text/plain"]
    printed = "".join(o.get("text", "") for o in stream.outputs)
    assert "response.incomplete" in printed or "response.completed" in printed
