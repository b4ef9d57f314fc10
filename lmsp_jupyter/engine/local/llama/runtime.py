"""llama.cpp's process-wide set-up and runtime: its log, the switch to its reference kernels,
the build's features (AVX2, tinyBLAS output tiles, OpenMP) and the model parameters every model
of this process loads with."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import llama_cpp

from ...gguf import GgufError, read_gguf_metadata

log = logging.getLogger(__name__)

_DEFAULT_MODEL_PARAMS = llama_cpp.llama_cpp.llama_model_default_params
_PARAMS_LOCK = threading.Lock()
_PREPARED_LOCK = threading.Lock()
#: ``prepare_llama_cpp``'s verdict, once taken: the process's, as llama.cpp's read of the switch.
_prepared: list[str | None] = []


def prepare_llama_cpp() -> str | None:
    """Ready llama.cpp for this process's engine; called where the engine starts and before any
    model here is loaded. The first call quiets llama.cpp's log below errors, unless its logger
    (``llama-cpp-python``) has a level already: otherwise it floods the server's stderr.

    Returns why the text at temperature 0 may depend on what else runs or was cached
    (``None``: it does not), and logs it once: llama.cpp built without AVX2 kernels, or without
    the switch to its reference kernels that token passes take (``engine/passes.py``).
    """
    with _PREPARED_LOCK:
        if not _prepared:
            logger = logging.getLogger("llama-cpp-python")
            if logger.level == logging.NOTSET:
                logger.setLevel(logging.ERROR)
            _prepared.append(_without_kernel_switch() or without_avx2())
            if _prepared[0] is not None:
                log.warning("temperature 0 is not exact in this process: %s", _prepared[0])
        return _prepared[0]


@functools.cache
def _kernel_functions() -> tuple[Any, Any, Any, Any, Any] | None:
    """llama.cpp's functions that reach a context's CPU backend and switch its reference
    kernels: ``llama_context::get_sched`` (a C++ method of llama.cpp's, exported, with no C
    name), ggml's scheduler's backends and their names, ``ggml_backend_cpu_set_use_ref``."""
    lib = llama_cpp.llama_cpp._lib  # libllama, whose lookups reach the ggml it links
    try:
        functions = (
            lib._ZNK13llama_context9get_schedEv,
            lib.ggml_backend_sched_get_n_backends,
            lib.ggml_backend_sched_get_backend,
            lib.ggml_backend_name,
            lib.ggml_backend_cpu_set_use_ref,
        )
    except AttributeError:
        return None
    get_sched, count, backend, name, use_ref = functions
    get_sched.argtypes, get_sched.restype = [ctypes.c_void_p], ctypes.c_void_p
    count.argtypes, count.restype = [ctypes.c_void_p], ctypes.c_int
    backend.argtypes, backend.restype = [ctypes.c_void_p, ctypes.c_int], ctypes.c_void_p
    name.argtypes, name.restype = [ctypes.c_void_p], ctypes.c_char_p
    use_ref.argtypes, use_ref.restype = [ctypes.c_void_p, ctypes.c_bool], None
    return functions


def _without_kernel_switch() -> str | None:
    """Why token passes cannot take llama.cpp's reference kernels, if they cannot."""
    if _kernel_functions() is None:
        return (
            "this llama-cpp-python's llama.cpp has no switch to its reference CPU kernels "
            "(ggml_backend_cpu_set_use_ref, llama_context::get_sched)"
        )
    return None


class KernelSwitch:
    """A context's CPU backend, switched between llama.cpp's reference kernels and its fast
    ones (``engine/passes.py``); a no-op where llama.cpp has no switch."""

    def __init__(self, ctx: Any) -> None:
        functions = _kernel_functions()
        self._set: Callable[[bool], None] | None = None
        self._reference: bool | None = None
        if functions is None:
            return
        get_sched, count, backend, name, use_ref = functions
        sched = get_sched(ctx)
        for index in range(count(sched)):
            cpu = backend(sched, index)
            if name(cpu) == b"CPU":
                self._set = functools.partial(use_ref, cpu)
                self.reference(True)

    def reference(self, on: bool) -> None:
        """The next passes run the reference kernels (``on``) or the fast ones."""
        if self._set is not None and self._reference is not on:
            self._set(on)
            self._reference = on


def use_reference_kernels(ctx: Any) -> None:
    """Every pass of the llama.cpp context ``ctx`` runs the reference kernels, as the engine's
    embedder does (to compare another context with it, llama-cpp-python's ``Llama._ctx.ctx``)."""
    KernelSwitch(ctx)


@functools.cache
def build_features() -> str:
    """What llama.cpp's CPU backend was built with (``llama_print_system_info``:
    ``"AVX2 = 1 | ... | LLAMAFILE = 1 | OPENMP = 1 | ..."``)."""
    features: bytes = llama_cpp.llama_print_system_info()
    return features.decode(errors="replace")


def without_avx2() -> str | None:
    """Why an x86-64 build of llama.cpp without AVX2 kernels is not exact, if it is one.

    Its CPU kernels then add a pass of one to three tokens in another order than a longer one
    (measured with ``benchmarks/pass_sizes.py`` on a build with ``-DGGML_AVX2=OFF``); builds
    with AVX2 or AVX-512 give the same logits for every pass the engine makes.
    """
    features = build_features()
    if "AVX = 1" in features and "AVX2 = 1" not in features:
        return (
            "llama.cpp was built without AVX2, and its kernels without AVX2 give a pass of a few "
            "tokens other last bits than a longer one; build llama-cpp-python for this CPU's "
            "AVX2 (the default on a CPU that has it) for exact text"
        )
    return None


#: GGML's types whose products with more than one row llamafile's tinyBLAS computes on x86
#: (Q4_0, Q5_0, Q8_0, IQ4_NL, against rows quantized to Q8_0; ``llamafile/sgemm.cpp``).
_TINYBLAS_Q0_TYPES = frozenset({2, 6, 8, 20})


def output_tile(output_type: int | None) -> int:
    """How many rows of logits llama.cpp's CPU kernels compute in one sweep over the weights of
    an output layer of GGML type ``output_type``; 1 when a pass's row count does not matter.

    llamafile's tinyBLAS computes a product in tiles of 4 rows on 32 vector registers (AVX-512)
    and of 2 on 16 (AVX2), then the rows left over in a second sweep with narrower tiles. The
    output layer's weights are a model's largest matrix (the bundled model's 262k x 640, 178 MB),
    and that second sweep costs a pass 11–17 ms on 2 cores: a verification of 5 to 7 tokens
    takes longer than one of 8 (``benchmarks/pass_sizes.py --widths``).
    """
    features = build_features()
    if output_type not in _TINYBLAS_Q0_TYPES or "LLAMAFILE = 1" not in features:
        return 1
    if "AVX512 = 1" in features:
        return 4
    return 2 if "AVX = 1" in features else 1


def model_output_tile(path: Path) -> int:
    """``output_tile`` of the GGUF model at ``path``: 1 when its tensor table cannot be read."""
    try:
        return output_tile(read_gguf_metadata(path).output_type)
    except (GgufError, OSError):
        return 1


#: The OpenMP runtimes llama.cpp's CPU backend may be built with (GCC's, LLVM's, Intel's).
_OPENMP_LIBRARIES = ("libgomp.so.1", "libomp.so", "libomp.so.5", "libiomp5.so")
_OMP_PAUSE_SOFT = 1


@functools.cache
def _openmp_pause() -> Callable[[], int] | None:
    """``omp_pause_resource_all(omp_pause_soft)`` of the OpenMP runtime this process has
    loaded for llama.cpp, if it has one (nothing is loaded here that is not loaded already)."""
    if "OPENMP = 1" not in build_features():
        return None
    for name in _OPENMP_LIBRARIES:
        try:
            runtime = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            pause = runtime.omp_pause_resource_all
        except (OSError, AttributeError):
            continue
        pause.argtypes = [ctypes.c_int]
        pause.restype = ctypes.c_int
        return lambda: int(pause(_OMP_PAUSE_SOFT))
    return None


def release_compute_threads() -> None:
    """Let the calling thread's llama.cpp compute threads go, when it has no pass to run.

    llama.cpp built with OpenMP (the default where the compiler has it) computes each pass
    with a team of threads that belongs to the thread running the pass, and keeps it after
    the pass. Each model computes on a thread of its own (its worker, its embedder), so a
    second model that ran once leaves a team of its own behind; with more OpenMP threads
    alive than cores, the runtime waits at each of a pass's barriers by sleeping instead of
    spinning, and every model decodes at about 0.65 of its speed (2 cores: 28 against 44
    tokens/s, ``benchmarks/idle_models.py``). Called by a model's thread as it goes idle:
    the team is made again by the next pass, in well under a millisecond. Nothing happens
    without OpenMP."""
    pause = _openmp_pause()
    if pause is not None:
        pause()


def unrepacked_model_params() -> Any:
    """llama.cpp's model parameters for every model loaded in this process, the engine's own
    (``LlamaModel``, ``LlamaEmbedder``) and llama-cpp-python's ``Llama`` alike
    (``no_weight_repacking``): weights not repacked into llama.cpp's CPU "extra buffer types".
    Repacked weights process rows in groups, which ties a token's result to its neighbours in
    the batch, and on CPUs with AMX the repacked matrix product crashes llama.cpp's decode."""
    params = _DEFAULT_MODEL_PARAMS()
    params.use_extra_bufts = False
    return params


@contextmanager
def no_weight_repacking() -> Iterator[None]:
    """Models that llama-cpp-python's ``Llama`` loads meanwhile get ``unrepacked_model_params``
    (``Llama`` has no switch for it, so its default model parameters are swapped while it
    loads), llama.cpp readied as for the engine (``prepare_llama_cpp``). Whatever loads the
    bundled model in-process to be compared with the engine loads this way (the benchmarks' raw
    side, their ``llama_cpp.server`` launcher, the tests' reference embedder)."""
    prepare_llama_cpp()
    with _PARAMS_LOCK:
        llama_cpp.llama_cpp.llama_model_default_params = unrepacked_model_params
        try:
            yield
        finally:
            llama_cpp.llama_cpp.llama_model_default_params = _DEFAULT_MODEL_PARAMS
