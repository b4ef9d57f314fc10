"""Claude Code itself (``@anthropic-ai/claude-code`` from npm, its native binary, unmodified)
against Anthropic's Messages API on the Jupyter port and the bundled model: a turn of
``claude -p`` ends with exit 0 and ``is_error: false``, and the next turn of the same session
reads its prompt from the prefix cache.

A base model continues text rather than ending its turn, and Claude Code takes an answer cut
at ``max_tokens`` for an error: ``CLAUDE_CODE_EXTRA_BODY`` asks for greedy decoding that stops
at the first line end, so each turn ends. ``--tools ""`` leaves Claude Code's tools out: one
of its built-in tools' schemas (``Workflow``) has a ``maxLength`` the decoder does not enforce,
which refuses the request (docs/other-tools.md). Run as the machine's user (root here), without
``--dangerously-skip-permissions``: no tool is offered, so nothing asks for permission.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MODEL, LiveServer
from tests.helpers import JS_CLIENTS, install_js_clients, node_env

CLAUDE = JS_CLIENTS / "node_modules" / ".bin" / "claude"
#: Greedy, and stopped at the first line end: a base model's turn ends (see above).
EXTRA_BODY = {"temperature": 0, "stop_sequences": ["\n"]}


def claude(server: LiveServer, home: Path, *args: str) -> dict[str, Any]:
    """Run ``claude -p ... --output-format json`` in ``home`` (its HOME too) against
    ``server``; the JSON result it printed."""
    inherited = {
        name: value
        for name, value in node_env().items()
        if not name.startswith(("ANTHROPIC_", "CLAUDE"))
    }
    env = {
        **inherited,
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": f"{server.root}lmsp/anthropic",
        "ANTHROPIC_AUTH_TOKEN": server.token,
        "ANTHROPIC_MODEL": MODEL,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "64",
        "CLAUDE_CODE_EXTRA_BODY": json.dumps(EXTRA_BODY),
    }
    run = subprocess.run(
        [str(CLAUDE), *args, "--output-format", "json", "--tools", ""],
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
    result: dict[str, Any] = json.loads(run.stdout)
    return result


@pytest.fixture(scope="module")
def turns(
    live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, Any]]:
    """Two turns of one Claude Code session: a first one, then ``--resume`` of it."""
    install_js_clients()
    home = tmp_path_factory.mktemp("claude-home")
    first = claude(live_server, home, "-p", "Say hello.")
    second = claude(live_server, home, "-p", "Say it again.", "--resume", first["session_id"])
    return [first, second]


def test_a_turn_completes_without_error(turns: list[dict[str, Any]]) -> None:
    for turn in turns:
        assert (turn["type"], turn["is_error"]) == ("result", False), turn
        assert turn["stop_reason"] == "end_turn"
        assert turn["usage"]["output_tokens"] > 0


def test_the_second_turn_of_a_session_reads_its_prompt_from_the_cache(
    turns: list[dict[str, Any]],
) -> None:
    first, second = turns
    assert second["session_id"] == first["session_id"]
    usage = second["usage"]
    # Claude Code's per-request billing line is dropped: all but the new turn is cached.
    assert usage["cache_read_input_tokens"] > usage["input_tokens"] > 0
