"""Helpers every suite shares: a function tool, where the repository is, the JavaScript
clients, how alike two vectors of one text must be, and :func:`eventually`, the one way a
test waits for a condition.

A test waits for what another process or thread does (a server starting, a task reaching an
event, a page receiving it) by polling a probe until it answers, never by sleeping a guessed
time. The time limit only bounds a failure: it is generous, and no test asserts on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

import numpy as np
import numpy.typing as npt

T = TypeVar("T")

#: A function tool the bundled model calls well: one short string argument.
WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def message_events(deltas: int, final: str = "response.completed") -> list[str]:
    """The event names of a stream that answers with one message of ``deltas`` deltas (11.4)."""
    return [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        final,
    ]


def message_text(response: dict[str, Any]) -> str:
    """The message text of a Response (JSON)."""
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def call_events(deltas: int, final: str = "response.completed") -> list[str]:
    """The event names of a stream that answers with one function call of ``deltas`` argument
    deltas (11.4)."""
    return [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * deltas,
        "response.function_call_arguments.done",
        "response.output_item.done",
        final,
    ]


#: The repository's root.
ROOT = Path(__file__).resolve().parent.parent
#: OpenAI's JavaScript SDK and the AI SDK, installed from their lockfile.
JS_CLIENTS = ROOT / "tests" / "compat" / "js"


def node_env() -> dict[str, str]:
    """The environment with the virtualenv's node and npm first on PATH."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def install_js_clients(directory: Path = JS_CLIENTS) -> None:
    """``npm ci`` the packages of ``directory`` once (a fresh machine has none)."""
    if (directory / "node_modules" / ".package-lock.json").exists():
        return
    subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund"],
        cwd=directory,
        env=node_env(),
        check=True,
        capture_output=True,
        timeout=600,
    )


def run_js_client(script: str, env: dict[str, str]) -> dict[str, Any]:
    """Run ``script`` of :data:`JS_CLIENTS` with node (its packages installed first), ``env``
    added to the environment; the JSON object it printed."""
    install_js_clients()
    run = subprocess.run(
        ["node", script],
        cwd=JS_CLIENTS,
        env={**node_env(), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result: dict[str, Any] = json.loads(run.stdout)
    return result


#: The least cosine similarity of one text's vectors embedded alone and beside other texts:
#: llama.cpp's batched embedding changes a vector's last bits with its batch, on every CPU in
#: its own way. Measured with the bundled model, mean pooling, texts of 6 to 300 tokens alone
#: and in batches of 2 to 16 (2026-12-04): at least 0.99995 on this machine's
#: AVX-512 build and 0.99996 on a build without AVX-512 (AVX2), max abs component 3e-3;
#: different texts stay far below (cat/kitten 0.90, cat/stocks 0.58).
SAME_TEXT_COSINE = 0.9999


def same_text(a: npt.ArrayLike, b: npt.ArrayLike) -> bool:
    """Whether ``a`` and ``b`` are vectors of one text (in different batches): their cosine
    similarity is at least :data:`SAME_TEXT_COSINE`."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y))) >= SAME_TEXT_COSINE


class _Deadline:
    def __init__(self, within: float, what: str | Callable[[], str]) -> None:
        self.within = within
        self.what = what
        self.end = time.monotonic() + within

    def reached(self, value: T | None) -> TypeGuard[T]:
        """Whether ``value`` answers; raise AssertionError once the time is over."""
        if value:
            return True
        if time.monotonic() >= self.end:
            what = self.what() if callable(self.what) else self.what
            raise AssertionError(f"{what}: not within {self.within:g} s (last: {value!r})")
        return False


def eventually(
    probe: Callable[[], T | None],
    *,
    within: float = 120.0,
    interval: float = 0.05,
    what: str | Callable[[], str] = "the condition",
) -> T:
    """Call ``probe`` every ``interval`` seconds until it returns a true value; return that value.

    An exception of ``probe`` ends the wait (a probe raises when waiting is pointless, e.g. the
    process it waits for exited). After ``within`` seconds: AssertionError naming ``what``
    (a string, or a function that describes the state then) and the last value.
    """
    deadline = _Deadline(within, what)
    while True:
        value = probe()
        if deadline.reached(value):
            return value
        time.sleep(interval)


async def eventually_async(
    probe: Callable[[], Awaitable[T | None]],
    *,
    within: float = 120.0,
    interval: float = 0.05,
    what: str | Callable[[], str] = "the condition",
) -> T:
    """:func:`eventually` for a coroutine probe, waiting with ``asyncio.sleep``."""
    deadline = _Deadline(within, what)
    while True:
        value = await probe()
        if deadline.reached(value):
            return value
        await asyncio.sleep(interval)


#: The MCP servers of npm the tests run over stdio, unmodified (installed with the JS clients).
MCP_EVERYTHING = JS_CLIENTS / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
MCP_FILESYSTEM = JS_CLIENTS / "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"


def mcp_stdio_server(script: Path, *args: str, **entry: Any) -> dict[str, Any]:
    """An ``mcp.json`` entry running ``script`` (one of the npm MCP servers) with node."""
    install_js_clients()
    node = shutil.which("node", path=node_env()["PATH"])
    assert node is not None, "node is not installed"
    return {"command": node, "args": [str(script), *args], **entry}


@contextlib.contextmanager
def mcp_http_server(record: Path) -> Iterator[str]:
    """The Python SDK's Streamable HTTP server of ``tests/mcp_http_server.py`` in a process;
    its URL. Its tool ``note`` appends to ``record``."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    script = ROOT / "tests" / "mcp_http_server.py"
    process = subprocess.Popen(
        [sys.executable, str(script), str(port), str(record)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        if process.poll() is not None:
            raise RuntimeError("the MCP test server exited")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        return False

    try:
        eventually(listening, within=60, what="the MCP test server listening")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)
