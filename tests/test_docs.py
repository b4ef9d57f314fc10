"""The README's commands and the service page's curl recipes work as written."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import LiveServer
from tests.docs_blocks import code_blocks, run_block
from tests.helpers import ROOT

README = (ROOT / "README.md").read_text()
SERVICE_PAGE = (ROOT / "docs" / "service.md").read_text()


def test_readme_has_exactly_two_set_up_commands_and_ci_runs_the_test_one() -> None:
    set_up = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert [block.strip() for block in code_blocks(set_up, "bash")] == [
        "./scripts/run",
        "./scripts/test",
    ]
    assert "./scripts/test" in (ROOT / ".ci" / "run").read_text()


@pytest.fixture
def curl_env(live_server: LiveServer) -> dict[str, str]:
    return {**os.environ, "LMSP": live_server.lmsp, "JUPYTER_TOKEN": live_server.token}


def test_readme_curl_example_works_as_written(curl_env: dict[str, str]) -> None:
    (block,) = [b for b in code_blocks(README, "bash") if "curl " in b]
    output = run_block("bash", block, curl_env)
    assert output.returncode == 0, output.stderr
    answer = json.loads(output.stdout)
    assert answer["object"] == "response" and answer["status"] in ("completed", "incomplete")
    assert answer["output"][0]["type"] == "message"


def test_service_page_curl_recipes_work_as_written(curl_env: dict[str, str]) -> None:
    blocks = [b for b in code_blocks(SERVICE_PAGE, "bash") if "curl " in b]
    outputs = [run_block("bash", b, curl_env) for b in blocks]
    assert all(o.returncode == 0 for o in outputs), [o.stderr for o in outputs]
    decoder = json.JSONDecoder()
    service, end = decoder.raw_decode(outputs[0].stdout)
    models, _ = decoder.raw_decode(outputs[0].stdout[end:])
    assert service["object"] == "service" and models["object"] == "list"
    answer = json.loads(outputs[1].stdout)
    assert answer["object"] == "response" and answer["status"] == "incomplete"
    streamed = outputs[2].stdout
    assert streamed.startswith("retry: 2000\nid: 1\nevent: response.created\n")
    assert "event: response.incomplete" in streamed or "event: response.completed" in streamed
    task_events = outputs[3].stdout
    assert task_events.count("event: response.created") == 1
    replayed = task_events.split("event: response.created", 1)[1]
    assert "\nid: 4\n" in replayed
    task = json.loads(task_events[task_events.rindex('{"id":"task_') :])
    assert task["status"] == "incomplete"
    city = json.loads(json.loads(outputs[4].stdout)["output"][0]["content"][0]["text"])
    assert set(city) == {"city", "country"}
    loaded, end = decoder.raw_decode(outputs[5].stdout)
    unloaded, _ = decoder.raw_decode(outputs[5].stdout[end:])
    assert (loaded["status"], unloaded["status"]) == ("loaded", "available")
    assert loaded["memory_bytes"] > 0 and "memory_bytes" not in unloaded


def test_readme_stays_short_and_links_each_docs_page_once() -> None:
    assert len(README.splitlines()) <= 220
    pages = sorted(path.name for path in (ROOT / "docs").glob("*.md"))
    assert {page: README.count(f"(docs/{page})") for page in pages} == dict.fromkeys(pages, 1)
