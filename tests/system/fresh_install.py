"""The project as a newcomer gets it: a clone of HEAD, installed by ``binder/postBuild`` into a
new virtual environment. Built once per test session and shared by the Binder and packaging
tests; pip's cache keeps it to a few minutes (the lab extension is still built with npm).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, free_port
from tests.helpers import ROOT, eventually

#: Generous: a cold pip cache compiles llama-cpp-python, and npm installs the lab toolchain.
INSTALL_TIMEOUT = 3600


@dataclass
class FreshInstall:
    """A clone of the repository and the virtual environment ``binder/postBuild`` filled."""

    clone: Path
    venv: Path
    home: Path
    #: How long ``binder/postBuild`` took.
    seconds: float

    def env(self, jupyter_dirs: Path | None = None) -> dict[str, str]:
        """The environment with the venv first on PATH and Jupyter's dirs under ``jupyter_dirs``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_")}
        env.pop("PYTHONPATH", None)
        env["VIRTUAL_ENV"] = str(self.venv)
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        if jupyter_dirs is not None:
            for name in ("config", "data", "runtime"):
                (jupyter_dirs / name).mkdir(parents=True, exist_ok=True)
                env[f"JUPYTER_{name.upper()}_DIR"] = str(jupyter_dirs / name)
        return env

    def run(
        self, *command: str | Path, cwd: Path | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """Run a command of the venv (in the clone by default) and fail with its output."""
        result = subprocess.run(
            [str(part) for part in command],
            cwd=cwd or self.clone,
            env=self.env(self.home / "jupyter"),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
        return result

    def output(self, *command: str | Path) -> str:
        """What a command printed, stdout then stderr, without terminal colours."""
        result = self.run(*command)
        return re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)


_built: list[FreshInstall] = []


def fresh_install(tmp_path_factory: pytest.TempPathFactory) -> FreshInstall:
    """Clone HEAD, create a venv and run ``binder/postBuild`` in it, once per session."""
    if not _built:
        home = tmp_path_factory.mktemp("fresh")
        clone, venv = home / "clone", home / "venv"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        install = FreshInstall(clone=clone, venv=venv, home=home, seconds=0.0)
        started = time.monotonic()
        install.run(clone / "binder" / "postBuild", timeout=INSTALL_TIMEOUT)
        install.seconds = time.monotonic() - started
        _built.append(install)
    return _built[0]


def start_jupyter(
    install: FreshInstall, command: Sequence[str | Path], tmp: Path, ready_path: str
) -> LiveServer:
    """Start a Jupyter command of the fresh install on loopback; wait until ``ready_path``
    (relative to the server root, with the token) answers 200."""
    port, token = free_port(), secrets.token_hex(16)
    (tmp / "root").mkdir(parents=True, exist_ok=True)
    arguments = [
        *(str(part) for part in command),
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={tmp / 'root'}",
        *(["--allow-root"] if os.geteuid() == 0 else []),
    ]
    with (tmp / "server.log").open("wb") as log:  # the server writes to its own copy
        process = subprocess.Popen(
            arguments, cwd=tmp, env=install.env(tmp), stdout=log, stderr=subprocess.STDOUT
        )
    server = LiveServer(f"http://127.0.0.1:{port}/", token, process, str(tmp / "root"))

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError((tmp / "server.log").read_text())
        with contextlib.suppress(httpx.TransportError):
            answer = httpx.get(server.root + ready_path, headers=bearer(server), timeout=10)
            return answer.status_code == 200
        return False

    def what() -> str:
        return f"the server answering:\n{(tmp / 'server.log').read_text()}"

    try:
        eventually(answers, within=120, interval=0.3, what=what)
    except AssertionError:
        process.kill()
        raise
    return server


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    """Show a timing on the terminal even while pytest captures output."""
    with capsys.disabled():
        print(f"\n{line}")


def bearer(server: LiveServer) -> dict[str, str]:
    """The header that authenticates with the server's token."""
    return {"Authorization": f"Bearer {server.token}"}
