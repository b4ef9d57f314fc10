"""The configuration reference page is generated from LmspApp's traits and kept up to date."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.manager import ModelManager
from lmsp_jupyter.engine.router import EngineRouter
from lmsp_jupyter.server.app import LmspApp
from lmsp_jupyter.server.reference import reference
from lmsp_jupyter.server.task_store import TaskStore
from lmsp_jupyter.service.anthropic import AnthropicModels
from lmsp_jupyter.service.mcp import McpServers

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_committed_page_equals_the_generated_reference() -> None:
    assert PAGE.read_text() == reference()


def test_the_module_prints_the_reference() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "lmsp_jupyter.server.reference"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert printed.stdout == reference()


def test_every_configurable_trait_has_one_section_with_its_help() -> None:
    page = reference()
    counts = (
        (LmspApp, 19),
        (LocalEngine, 5),
        (ModelManager, 3),
        (EngineRouter, 3),
        (TaskStore, 9),
        (AnthropicModels, 1),
        (McpServers, 5),
    )
    for cls, count in counts:
        own = cls.class_own_traits(config=True)
        assert page.count(f"\n## `{cls.__name__}.") == len(own) == count
    assert "## `LocalEngine.context_size`\n\n- Type: `Int`\n- Default: `8192`\n\n" in page
    assert "- Default: the number of CPU cores (`os.cpu_count()`)" in page
    assert "'sha256': '&lt;hex SHA-256 of the token>'" in page
    assert (
        "## `ModelManager.memory_budget_bytes`\n\n- Type: `Int`\n"
        "- Default: 50% of the machine's physical RAM\n"
    ) in page
