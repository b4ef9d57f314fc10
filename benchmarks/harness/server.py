"""``jupyter lmsp`` (or ``jupyter server`` with the extension) as a subprocess of a benchmark."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
#: Runs ``jupyter-lmsp`` (argv[2]) under cProfile counting the CPU time of the main thread
#: (the event loop) only, not wall time, so the preemptions of a busy machine do not count.
PROFILER = """
import cProfile, runpy, sys, time
out, script = sys.argv[1:3]
sys.argv = sys.argv[2:]
profile = cProfile.Profile(time.thread_time)
try:
    profile.runcall(runpy.run_path, script, run_name="__main__")
except SystemExit:
    pass
finally:
    profile.dump_stats(out)
"""


@dataclass(frozen=True)
class Server:
    """A running server: where it answers, its token and its process id."""

    base_url: str
    token: str
    pid: int

    @property
    def headers(self) -> dict[str, str]:
        """The Jupyter token as a bearer token: its requests are owned by ``jupyter``."""
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def lmsp_url(self) -> str:
        """The base of the LMSP endpoints."""
        return f"{self.base_url}/lmsp/v1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_command(
    port: int,
    token: str,
    root: Path,
    *,
    app: str = "lmsp",
    store_path: Path | None = None,
    profile: Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``jupyter {app}`` with a fixed port and token and no model stores but the bundled one.

    ``app`` is ``lmsp`` (the service alone) or ``server`` (which loads the extension too).
    ``store_path``: the service's SQLite store (default: its own). With ``profile``, under
    cProfile (its main thread: the event loop), the stats saved there. ``extra``: more arguments.
    """
    script = Path(sys.executable).with_name(f"jupyter-{app}")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "jupyter", app]
    if profile is not None:
        if not script.exists():
            raise RuntimeError(f"profiling the server needs {script}")
        command = [sys.executable, "-c", PROFILER, str(profile), str(script)]
    command += [
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LmspApp.ollama_dir=",
        "--LmspApp.huggingface_cache_dir=",
    ]
    if store_path is not None:
        command.append(f"--LmspApp.store_path={store_path}")
    if os.geteuid() == 0:
        command.append("--allow-root")
    return [*command, *extra]


@contextlib.contextmanager
def running_server(
    log_path: Path,
    *,
    app: str = "lmsp",
    root: Path | None = None,
    store_path: Path | None = None,
    profile: Path | None = None,
    extra: Sequence[str] = (),
) -> Iterator[Server]:
    """Start the server (its output to ``log_path``), yield it once it answers, always stop it.

    ``root``: its root directory (default: a fresh temporary one); the other arguments are
    :func:`server_command`'s.
    """
    port, token = free_port(), secrets.token_hex(16)
    with contextlib.ExitStack() as stack:
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        log = stack.enter_context(log_path.open("wb"))
        command = server_command(
            port, token, root, app=app, store_path=store_path, profile=profile, extra=extra
        )
        # Its own session and no stdin: Ctrl-C reaches only the benchmark, which then stops it.
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            server = Server(f"http://127.0.0.1:{port}", token, process.pid)
            wait_until_ready(server, process)
            yield server
        finally:
            stop(process)


def wait_until_ready(server: Server, process: subprocess.Popen[bytes]) -> None:
    """Poll ``GET /lmsp/v1`` until it answers 200; fail if the server exits or never does."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode}")
        with contextlib.suppress(httpx.TransportError):
            answer = httpx.get(server.lmsp_url, headers=server.headers, timeout=2)
            if answer.status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the server did not answer within {STARTUP_TIMEOUT_S:.0f} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if the server lingers."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
