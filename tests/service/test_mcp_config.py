"""``mcp.json`` as :mod:`lmsp_jupyter.service.mcp.config` reads it: the ``mcpServers`` format,
``${env:NAME}``, and entries that cannot be used kept with their error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmsp_jupyter.service.mcp.config import ConfigError, ServerConfig, read_config

ENVIRON = {"HOME": "/home/ada", "TOKEN": "s3cret"}


def servers(tmp_path: Path, entries: object) -> dict[str, ServerConfig]:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": entries}))
    return read_config(path, ENVIRON)


def test_stdio_and_remote_servers_with_env_references(tmp_path: Path) -> None:
    found = servers(
        tmp_path,
        {
            "files": {
                "command": "npx",
                "args": ["-y", "server-filesystem", "${env:HOME}/notes"],
                "env": {"KEY": "${env:TOKEN}"},
                "cwd": "${env:HOME}",
                "autoApprove": ["read_text_file"],
            },
            "search": {
                "url": "https://mcp.example.com/mcp",
                "headers": {"Authorization": "Bearer ${env:TOKEN}"},
            },
            "old": {"type": "sse", "url": "http://127.0.0.1:1/sse", "disabled": True},
        },
    )
    assert list(found) == ["files", "search", "old"]
    files, search, old = found.values()
    assert (files.transport, files.command, files.cwd) == ("stdio", "npx", "/home/ada")
    assert files.args == ("-y", "server-filesystem", "/home/ada/notes")
    assert files.env == {"KEY": "s3cret"} and files.auto_approve == {"read_text_file"}
    assert (search.transport, search.headers) == ("http", {"Authorization": "Bearer s3cret"})
    assert (old.transport, old.disabled, old.error) == ("sse", True, None)


def test_an_entry_that_cannot_be_used_keeps_its_error_and_the_others_work(
    tmp_path: Path,
) -> None:
    found = servers(
        tmp_path,
        {
            "unset": {"command": "x", "args": ["${env:NOPE}"]},
            "neither": {"args": []},
            "typed": {"command": "x", "args": "not a list"},
            "remote": {"url": "http://h/mcp", "type": "websocket"},
            "fine": {"command": "x"},
        },
    )
    assert found["unset"].error == "${env:NOPE} is not set"
    assert found["neither"].error == "an entry needs a command (stdio) or a url (http, sse)"
    assert found["typed"].error == "args must be a list of strings"
    assert found["remote"].error == "type 'websocket' is neither 'http' nor 'sse'"
    assert found["remote"].transport == "http"
    assert found["fine"].error is None


def test_no_file_is_no_servers_and_a_broken_one_is_a_config_error(tmp_path: Path) -> None:
    assert read_config(tmp_path / "absent.json") == {}
    broken = tmp_path / "mcp.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="is not JSON"):
        read_config(broken)
    broken.write_text('{"mcpServers": []}')
    with pytest.raises(ConfigError, match="mcpServers must be an object"):
        read_config(broken)
