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
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
#: The repository root: child processes start there.
REPOSITORY = Path(__file__).resolve().parents[2]
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
    store_url: str | None = None,
    profile: Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``jupyter {app}`` with a fixed port and token and no model stores but the bundled one.

    ``app`` is ``lmsp`` (the service alone) or ``server`` (which loads the extension too).
    ``store_url``: the service's store, as ``TaskStore.store_url`` (default: its own SQLite
    file). With ``profile``, under cProfile (its main thread: the event loop), the stats saved
    there. ``extra``: more arguments.
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
    if store_url is not None:
        command.append(f"--TaskStore.store_url={store_url}")
    if os.geteuid() == 0:
        command.append("--allow-root")
    return [*command, *extra]


@contextlib.contextmanager
def running_server(
    log_path: Path,
    *,
    app: str = "lmsp",
    root: Path | None = None,
    store_url: str | None = None,
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
        command = server_command(
            port, token, root, app=app, store_url=store_url, profile=profile, extra=extra
        )
        server = Server(f"http://127.0.0.1:{port}", token, 0)
        pid = stack.enter_context(
            running_process(command, log_path, server.lmsp_url, server.headers)
        )
        yield replace(server, pid=pid)


@contextlib.contextmanager
def running_process(
    command: Sequence[str], log_path: Path, ready_url: str, headers: dict[str, str] | None = None
) -> Iterator[int]:
    """Start a server process (its output to ``log_path``), yield its pid once ``GET ready_url``
    answers 200, and always stop it: the service, or a third-party server it is compared with."""
    with log_path.open("wb") as log:
        # Its own session and no stdin: Ctrl-C reaches only the benchmark, which then stops it.
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPOSITORY,  # where `python -m benchmarks...` finds this package
        )
        try:
            wait_until_ready(ready_url, headers or {}, process)
            yield process.pid
        finally:
            stop(process)


def wait_until_ready(url: str, headers: dict[str, str], process: subprocess.Popen[bytes]) -> None:
    """Poll ``GET url`` until it answers 200; fail if the process exits or it never does."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with code {process.returncode}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, headers=headers, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {STARTUP_TIMEOUT_S:.0f} s")


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
