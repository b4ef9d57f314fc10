"""The ``ollama`` npm library against the Ollama API on the Jupyter port, run by node from
``tests/compat/js`` (``ollama.mjs``): list, show, chat streamed and not, generate, a format
schema, tools, ps and an error."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import jsonschema
import pytest

from tests.conftest import MODEL, LiveServer
from tests.helpers import JS_CLIENTS, install_js_clients, node_env


@pytest.fixture(scope="module")
def results(live_server: LiveServer) -> dict[str, Any]:
    """What each call of ``ollama.mjs`` gave."""
    install_js_clients()
    env = {
        **node_env(),
        "OLLAMA_HOST": f"{live_server.root}lmsp/ollama",
        "LMSP_TOKEN": live_server.token,
        "LMSP_MODEL": MODEL,
    }
    run = subprocess.run(
        ["node", "ollama.mjs"], cwd=JS_CLIENTS, env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result: dict[str, Any] = json.loads(run.stdout)
    return result


def test_version_list_and_show(results: dict[str, Any]) -> None:
    assert tuple(int(part) for part in results["version"].split(".")) >= (0, 6, 4)
    assert MODEL in results["list"]
    assert {"completion", "tools"} <= set(results["show"]["capabilities"])
    assert results["show"]["family"]


def test_chat_streamed_and_whole_agree(results: dict[str, Any]) -> None:
    chat = results["chat"]
    assert chat["streamed"] == chat["whole"] != ""
    assert (chat["done"], chat["doneReason"], chat["evalCount"]) == (True, "length", 8)


def test_generate(results: dict[str, Any]) -> None:
    assert results["generate"]["text"] != ""
    assert results["generate"]["doneReason"] == "length"


def test_format_schema_is_enforced(results: dict[str, Any]) -> None:
    assert results["format"]["doneReason"] == "stop"
    schema = {"type": "object", "properties": {"sunny": {"type": "boolean"}}, "required": ["sunny"]}
    jsonschema.validate(json.loads(results["format"]["content"]), schema)


def test_tool_calls_name_the_tool_with_object_arguments(results: dict[str, Any]) -> None:
    assert results["tools"]["done"] is True
    for call in results["tools"]["calls"]:
        assert call["name"] == "get_weather"
        assert isinstance(call["arguments"], dict)


def test_ps_lists_the_model_it_ran(results: dict[str, Any]) -> None:
    assert MODEL in results["ps"]


def test_an_unknown_model_is_an_ollama_error(results: dict[str, Any]) -> None:
    assert results["error"] == {"status": 404, "message": "model 'no-such-model' not found"}
