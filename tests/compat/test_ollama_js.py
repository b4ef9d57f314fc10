"""The ``ollama`` npm library against the Ollama API on the Jupyter port, run by node from
``tests/compat/js`` (``ollama.mjs``): list, show, chat streamed and not, generate (and with a
suffix), a format schema, tools, ps and an error; ``embed`` (``ollama_embed.mjs``) is in
``tests/server/test_embeddings.py``, whose server embeds."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from tests.conftest import MODEL, LiveServer
from tests.helpers import run_js_client


@pytest.fixture(scope="module")
def results(live_server: LiveServer) -> dict[str, Any]:
    """What each call of ``ollama.mjs`` gave."""
    env = {
        "OLLAMA_HOST": f"{live_server.root}lmsp/ollama",
        "LMSP_TOKEN": live_server.token,
        "LMSP_MODEL": MODEL,
    }
    return run_js_client("ollama.mjs", env)


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


def test_generate_with_a_suffix_the_model_cannot_fill_reads_the_raw_prompt(
    results: dict[str, Any],
) -> None:
    suffix = results["suffix"]
    assert suffix["text"] == suffix["raw"] != ""
    assert suffix["promptTokens"] == suffix["rawPromptTokens"] > 0
    assert suffix["doneReason"] == "length"


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
