"""Code blocks of the Markdown docs, and running them as a reader would."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def code_blocks(text: str, language: str) -> list[str]:
    """The bodies of the fenced blocks whose info string is exactly ``language``, in order."""
    return re.findall(rf"^```{re.escape(language)}\n(.*?)^```", text, flags=re.S | re.M)


def run_block(
    language: str,
    block: str,
    env: Mapping[str, str],
    *,
    timeout: float = 300,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a ``bash`` block (``set -e``), a ``python`` block or a ``js`` block (Node, ES module).

    ``cwd`` is where a ``js`` block's imports are resolved (its ``node_modules``).
    """
    commands = {
        "bash": ["bash", "-ec", block],
        "python": [sys.executable, "-c", block],
        "js": ["node", "--input-type=module", "-e", block],
    }
    return subprocess.run(
        commands[language], env=dict(env), capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
