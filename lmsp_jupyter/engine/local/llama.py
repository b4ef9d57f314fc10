"""The only code that touches llama_cpp: tokenizers, and models loaded for batched generation."""

from __future__ import annotations

import ctypes
import functools
import itertools
import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
import llama_cpp._ggml  # the libggml llama-cpp-python loaded, for ggml_get_name
import numpy as np
import numpy.typing as npt
from llguidance.llamacpp import lltokenizer_from_vocab

from ..generation import EngineError, ModelLoadError, SamplingParams, TokenLogprob
from ..gguf import GgufError, read_gguf_metadata
from ..guidance import SchemaCompiler, SchemaMatcher
from .logits import Penalties, TokenLogprobs

log = logging.getLogger(__name__)

#: Sampling when a request gives no temperature: llama.cpp's own defaults.
DEFAULT_TEMPERATURE = 0.8
_TOP_K = 40
_TOP_P = 0.95
_MIN_P = 0.05


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


class _KernelSwitch:
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
    _KernelSwitch(ctx)


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


def _tokenize(vocab: Any, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
    """``text``'s tokens in ``vocab``: with the model's BOS (``add_special``, when it takes
    one), special tokens written in it parsed as such (``parse_special``) or as text."""
    data = text.encode()
    capacity = len(data) + 8
    tokens = (llama_cpp.llama_token * capacity)()
    count = llama_cpp.llama_tokenize(
        vocab, data, len(data), tokens, capacity, add_special, parse_special
    )
    if count < 0:
        raise EngineError("a text could not be tokenized")
    return list(tokens[:count])


class LlamaTokenizer:
    """A vocabulary-only llama.cpp model: tokenizes prompts without the weights in memory."""

    def __init__(self, path: Path) -> None:
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            raise ModelLoadError(f"the tokenizer of {path.name} could not be loaded")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.bos_token = self._token_text(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos_token = self._token_text(llama_cpp.llama_vocab_eos(self._vocab))
        #: The token a raw text starts with, when the model wants one (chat templates write it).
        self.bos: int | None = (
            llama_cpp.llama_vocab_bos(self._vocab)
            if llama_cpp.llama_vocab_get_add_bos(self._vocab)
            and llama_cpp.llama_vocab_bos(self._vocab) >= 0
            else None
        )
        self._schemas: SchemaCompiler | None = None

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        buffer = ctypes.create_string_buffer(256)
        size = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, len(buffer), 0, True)
        return buffer.raw[: max(size, 0)].decode("utf-8", errors="replace")

    def tokenize(self, text: str) -> list[int]:
        """Tokens of a rendered prompt; special tokens in it are parsed as such."""
        return _tokenize(self._vocab, text, add_special=False, parse_special=True)

    @property
    def schemas(self) -> SchemaCompiler:
        """JSON Schemas compiled against this vocabulary (built on first use, in about a
        second); it uses the vocabulary, so it must not outlive ``close``. Thread-safe."""
        if self._schemas is None:
            count = llama_cpp.llama_vocab_n_tokens(self._vocab)
            ends = [t for t in range(count) if llama_cpp.llama_vocab_is_eog(self._vocab, t)]
            with warnings.catch_warnings():  # llguidance's bridge calls a deprecated function
                warnings.simplefilter("ignore", DeprecationWarning)
                tokenizer = lltokenizer_from_vocab(self._vocab, eos_token=ends)
            self._schemas = SchemaCompiler(tokenizer)
        return self._schemas

    def close(self) -> None:
        """Free the vocabulary."""
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None


@dataclass(frozen=True)
class BatchToken:
    """One token of a batch: its id, its position, its sequence, and whether logits are kept."""

    token: int
    position: int
    sequence: int
    logits: bool


def _filled(batch: Any, tokens: Sequence[BatchToken]) -> Any:
    """llama.cpp's ``batch`` holding ``tokens``, each of one sequence."""
    batch.n_tokens = len(tokens)
    for i, item in enumerate(tokens):
        batch.token[i] = item.token
        batch.pos[i] = item.position
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = item.sequence
        batch.logits[i] = item.logits
    return batch


class LlamaModel:
    """A model's weights and one llama.cpp context of ``sequences`` sequences, each with its
    own KV cache of ``cells`` cells (llama.cpp's non-unified cache: one stream per sequence).

    Sequences are numbered from 0. Every call must come from one thread (the model's worker);
    ``close`` frees it all.
    """

    def __init__(
        self, path: Path, *, cells: int, sequences: int, threads: int, most: int = 512
    ) -> None:
        """``most``: the most tokens one pass may hold, or one of each sequence when there
        are more sequences (the worker's ``batch_size``)."""
        prepare_llama_cpp()  # before this process's first evaluation, if it is that
        model_params = unrepacked_model_params()
        model_params.n_gpu_layers = 0
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), model_params)
        if not self._model:
            raise ModelLoadError(f"{path.name} could not be loaded")
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = cells * sequences
        # A pass holds one sequence's chunk, or one token of every sequence.
        params.n_batch = params.n_ubatch = max(most, sequences)
        params.n_seq_max = sequences
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = False
        # Sliding-window layers keep every position too: a window-sized cache is a ring whose
        # cell order depends on how the prompt was chunked, and a trimmed prefix stays usable.
        params.swa_full = True
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise ModelLoadError(f"{path.name} could not be given {sequences} contexts of {cells}")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._kernels = _KernelSwitch(self._ctx)
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self._batch = llama_cpp.llama_batch_init(max(most, sequences), 0, 1)
        self.vocab_size: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
        #: Rows of logits the kernels compute in one sweep over the output layer (``output_tile``).
        self.output_tile: int = model_output_tile(path)
        #: KV cells of each sequence (llama.cpp rounds the request up to a multiple of 256).
        self.cells: int = llama_cpp.llama_n_ctx_seq(self._ctx)
        self._pieces: dict[int, bytes] = {}

    def decode(self, tokens: Sequence[BatchToken], block: bool = False) -> None:
        """Evaluate one pass: a token pass, or a ``block`` pass (at least ``BLOCK`` tokens of
        one sequence); ``engine/passes.py`` says what each keeps exact.

        The logits of a token that asked for them are then at its index in ``tokens``.
        """
        self._kernels.reference(not block)
        status = llama_cpp.llama_decode(self._ctx, _filled(self._batch, tokens))
        if status != 0:
            raise EngineError(f"llama.cpp failed to evaluate a batch (status {status})")

    def logits(self, row: int) -> npt.NDArray[np.float32]:
        """The logits of the ``row``-th token that asked for them in the last batch.

        A view of llama.cpp's own buffer: writing to it changes what samplers see.
        """
        pointer = llama_cpp.llama_get_logits_ith(self._ctx, row)
        return np.ctypeslib.as_array(pointer, shape=(self.vocab_size,))

    def forget(self, sequence: int, start: int = 0) -> None:
        """Drop the cache of ``sequence`` from position ``start`` on."""
        llama_cpp.llama_memory_seq_rm(self._memory, sequence, start, -1)

    def piece(self, token: int) -> bytes:
        """The bytes ``token`` stands for; control tokens stand for none."""
        piece = self._pieces.get(token)
        if piece is None:
            buffer = ctypes.create_string_buffer(64)
            size = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, 64, 0, False)
            if size < 0:
                buffer = ctypes.create_string_buffer(-size)
                size = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, -size, 0, False)
            piece = self._pieces[token] = buffer.raw[:size]
        return piece

    def ends(self, token: int) -> bool:
        """Whether ``token`` ends generation (end of turn or of text)."""
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def sampler(self, params: SamplingParams, matcher: SchemaMatcher | None = None) -> TokenSampler:
        """A sampler for one sequence with ``params``, keeping to ``matcher``'s schema."""
        return TokenSampler(self, params, matcher)

    def close(self) -> None:
        """Free the context and the weights."""
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            llama_cpp.llama_model_free(self._model)
            self._ctx = self._model = None


class TokenSampler:
    """Picks one sequence's tokens: a llama.cpp sampler chain, and its schema checked lazily.

    The token is drawn from the unconstrained logits; only when the schema's matcher refuses
    it are the logits masked and the token drawn again, so the schema costs a full-vocabulary
    pass only on the steps where the model strays (at temperature 0 the result is the same).
    Tokens the schema forces are taken without sampling.

    Penalties (``engine/logits.py``) lower the logits in place before each draw. With
    ``top_logprobs`` set, ``logprobs`` holds the entries of the tokens ``next`` returned.
    """

    def __init__(
        self, model: LlamaModel, params: SamplingParams, matcher: SchemaMatcher | None = None
    ) -> None:
        self._model = model
        self._matcher = matcher
        self._penalties = Penalties(params.frequency_penalty, params.presence_penalty)
        self._top_logprobs = params.top_logprobs
        #: The logprobs of the tokens the last ``next`` returned (with ``top_logprobs`` set).
        self.logprobs: list[TokenLogprob] = []
        temperature = DEFAULT_TEMPERATURE if params.temperature is None else params.temperature
        #: At temperature 0 the token is the logits' argmax, taken with numpy: llama.cpp's
        #: greedy sampler picks the same (the first of equal maxima) but first copies the whole
        #: vocabulary into a candidate array, about 0.7 ms a token for Gemma's 262k entries.
        self._chain: llama_cpp.llama_sampler_p | None = None
        if temperature > 0:
            self._chain = llama_cpp.llama_sampler_chain_init(
                llama_cpp.llama_sampler_chain_default_params()
            )
            add = llama_cpp.llama_sampler_chain_add
            top_k = _TOP_K if params.top_k is None else params.top_k
            top_p = _TOP_P if params.top_p is None else params.top_p
            min_p = _MIN_P if params.min_p is None else params.min_p
            seed = llama_cpp.LLAMA_DEFAULT_SEED if params.seed is None else params.seed
            add(self._chain, llama_cpp.llama_sampler_init_top_k(top_k))
            add(self._chain, llama_cpp.llama_sampler_init_top_p(top_p, 1))
            add(self._chain, llama_cpp.llama_sampler_init_min_p(min_p, 1))
            add(self._chain, llama_cpp.llama_sampler_init_temp(temperature))
            add(self._chain, llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))

    def next(self, row: int) -> list[int]:
        """The next tokens: those the schema forces, or one sampled from the logits of
        ``row`` in the last batch (each already accepted by the schema's matcher)."""
        matcher = self._matcher
        forced = matcher.forced() if matcher is not None else []
        if forced:  # the only tokens the schema allows: probability 1
            wanted = self._top_logprobs is not None
            self.logprobs = [self._entry(token, None) for token in forced] if wanted else []
            return forced
        if self._penalties.active:
            self._penalties.apply(self._model.logits(row))
        logprobs = None
        if self._top_logprobs is not None:
            mask = matcher.mask_logits if matcher is not None else None
            logprobs = TokenLogprobs(self._model.logits(row), mask)
        token = self._draw(row)
        if matcher is not None and not matcher.allows(token):
            matcher.mask_logits(self._model.logits(row))
            token = self._draw(row)
        self.logprobs = [] if logprobs is None else [self._entry(token, logprobs)]
        return [token]

    def _draw(self, row: int) -> int:
        """One token from the logits of ``row``: their argmax at temperature 0, else the
        sampler chain's draw."""
        if self._chain is None:
            return int(np.argmax(self._model.logits(row)))
        token: int = llama_cpp.llama_sampler_sample(self._chain, self._model._ctx, row)
        return token

    def _entry(self, token: int, logprobs: TokenLogprobs | None) -> TokenLogprob:
        """``token``'s logprob entry (``logprobs`` ``None``: a forced token, probability 1)."""
        piece = self._model.piece
        if logprobs is None:
            top = ((piece(token), 0.0),) if self._top_logprobs else ()
            return TokenLogprob(piece(token), 0.0, top)
        alternatives = logprobs.top(self._top_logprobs or 0)
        return TokenLogprob(
            piece(token), logprobs.of(token), tuple((piece(t), lp) for t, lp in alternatives)
        )

    def accept(self, token: int) -> None:
        """Advance the schema past ``token``, which the sequence keeps; it counts for the
        penalties from the next draw on."""
        self._penalties.count(token)
        if self._matcher is not None:
            self._matcher.accept(token)

    @property
    def finished(self) -> bool:
        """Whether the schema's JSON is whole, so nothing more may follow."""
        return self._matcher is not None and self._matcher.finished()

    def close(self) -> None:
        """Free the sampler chain."""
        if self._chain:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None


def _mean(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return rows.mean(axis=0)  # type: ignore[no-any-return]


#: How a generative model's tokens' last states become one vector, by the pooling's name
#: (``LmspApp.embedding_models``): their mean, the first token's, the last token's.
POOLINGS: dict[str, Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]] = {
    "mean": _mean,
    "cls": lambda rows: rows[0],
    "last": lambda rows: rows[-1],
}


#: Tokens one embedding pass reads at most, when its texts are shorter. Each token of a pass
#: attends over all the pass's tokens (the texts of a pass share one unified KV cache, masked
#: per text), so short passes cost less a token (``benchmarks/embedding_passes.py``).
EMBEDDING_PASS_TOKENS = 256

#: The names llama.cpp gives, in a model's graph, the tensor it reads embeddings from (with
#: no pooling: each token's last states) and the output layer's logits.
_EMBEDDINGS_TENSOR = b"result_embd_pooled"
_LOGITS_TENSOR = b"result_output"

_ggml_get_name = llama_cpp._ggml.libggml.ggml_get_name
_ggml_get_name.argtypes = [ctypes.c_void_p]
_ggml_get_name.restype = ctypes.c_char_p


class _GraphCut:
    """llama.cpp's evaluation callback for a generative model that embeds: it ends each pass
    once the tokens' states are computed, before the output layer, whose logits (262,144 a
    token for Gemma 3) llama.cpp would otherwise compute for every token of an embedding pass
    and nobody reads. The states, and so the vectors, are those of the whole pass.

    ``record`` first, on a pass of the model: ``cuts`` then says whether its graph has one
    embeddings tensor with the output layer after it (a generative model; an embedding model
    has no output layer, or applies layers of its own after the states)."""

    def __init__(self) -> None:
        self.cuts = False
        self._names: list[bytes] | None = None
        #: The C function llama.cpp calls; it must live as long as the context.
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_node)

    def record(self) -> None:
        """Note the names of the next pass's tensors instead of cutting it."""
        self._names = []

    def recorded(self) -> None:
        """Decide from the names of the pass just evaluated whether passes are cut."""
        names, self._names = self._names or [], None
        embeddings = [i for i, name in enumerate(names) if name == _EMBEDDINGS_TENSOR]
        self.cuts = len(embeddings) == 1 and _LOGITS_TENSOR in names[embeddings[0] :]

    def _on_node(self, tensor: int, ask: bool, _data: int) -> bool:
        # Asked whether a tensor is wanted: only the embeddings, when cutting. Then given it,
        # computed: False ends the pass.
        if not ask:
            return False
        name: bytes = _ggml_get_name(tensor)
        if self._names is not None:
            self._names.append(name)
            return False
        return self.cuts and name == _EMBEDDINGS_TENSOR


class LlamaEmbedder:
    """A model loaded to embed text: each text's pooled, L2-normalized vector, many texts
    decoded together in one llama.cpp batch, each its own sequence (whose last bits then
    depend on the other texts of the batch, as llama-server's and Ollama's do). Each text must
    fit ``window`` tokens.

    With ``pooling`` ``None`` llama.cpp pools as the GGUF says (an embedding model). A
    generative model is given a ``pooling``: llama.cpp then returns every token's last states
    and the pass ends there (:class:`_GraphCut`), so its output layer is never computed; the
    states are pooled here as llama.cpp pools them (cosine 1 - 1e-14 with llama.cpp's own
    pooling of the whole graph, ``tests/engine/test_embedder.py``).
    """

    def __init__(
        self,
        path: Path,
        pooling: str | None,
        window: int,
        threads: int,
        *,
        pass_tokens: int = EMBEDDING_PASS_TOKENS,
    ) -> None:
        prepare_llama_cpp()  # before this process's first evaluation, if it is that
        self.pass_tokens = pass_tokens
        self.window = window
        if pooling is not None and pooling not in POOLINGS:
            raise ModelLoadError(f"unknown pooling {pooling!r}; one of {', '.join(POOLINGS)}")
        self._pool = None if pooling is None else POOLINGS[pooling]
        self._model = llama_cpp.llama_model_load_from_file(
            str(path).encode(), unrepacked_model_params()
        )
        if not self._model:
            raise ModelLoadError(f"{path.name} could not be loaded")
        self._cut = _GraphCut()
        params = llama_cpp.llama_context_default_params()
        params.embeddings = True
        params.pooling_type = (
            llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED  # the GGUF's
            if pooling is None
            else llama_cpp.LLAMA_POOLING_TYPE_NONE  # every token's states, pooled here
        )
        params.n_ctx = params.n_batch = params.n_ubatch = window
        self._sequences = min(window, llama_cpp.llama_max_parallel_sequences())
        params.n_seq_max = self._sequences
        params.kv_unified = True
        # Flash attention would move a text's vector with the other texts of its pass (to
        # cosine 0.9998 of the text alone, under the 0.9999 the tests hold).
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        if pooling is not None:
            params.cb_eval = self._cut.callback
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise ModelLoadError(f"{path.name} could not be given an embedding window of {window}")
        # The reference kernels: a text's vector moves less with the other texts of its pass.
        use_reference_kernels(self._ctx)
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self._batch = llama_cpp.llama_batch_init(window, 0, 1)
        self._width = llama_cpp.llama_model_n_embd(self._model)
        if pooling is not None:
            self._cut.record()
            self._decode([self.tokens("embed")])
            self._cut.recorded()
        release_compute_threads()

    def tokens(self, text: str) -> list[int]:
        """``text``'s tokens as the model embeds it (with its BOS, when it takes one)."""
        return _tokenize(self._vocab, text, add_special=True, parse_special=False)

    def count(self, text: str) -> int:
        """The tokens of ``text`` as the model embeds it."""
        return len(self.tokens(text))

    def embed(self, texts: Sequence[str], truncate: bool = False) -> tuple[list[list[float]], int]:
        """The vectors of ``texts`` and how many tokens they took; ``truncate``: each text cut
        to the window first. Consecutive texts share a pass up to ``pass_tokens`` tokens (a
        longer text takes one alone)."""
        tokenized = [self.tokens(text) for text in texts]
        if truncate:
            tokenized = [tokens[: self.window] for tokens in tokenized]
        over = [i for i, tokens in enumerate(tokenized) if len(tokens) > self.window]
        if over:
            raise EngineError(
                f"text {over[0]} has {len(tokenized[over[0]])} tokens; the window is {self.window}"
            )
        vectors: list[list[float]] = []
        try:
            for of_pass in self._passes(tokenized):
                vectors.extend(self._decode(of_pass))
        finally:
            release_compute_threads()  # the embedder's thread waits for the next request
        return vectors, sum(len(tokens) for tokens in tokenized)

    def _passes(self, tokenized: Sequence[list[int]]) -> Iterator[list[list[int]]]:
        """The texts' tokens in order, grouped into the passes that read them."""
        group: list[list[int]] = []
        group_tokens = 0
        for tokens in tokenized:
            full = len(group) == self._sequences
            if group and (full or group_tokens + len(tokens) > self.pass_tokens):
                yield group
                group, group_tokens = [], 0
            group.append(tokens)
            group_tokens += len(tokens)
        if group:
            yield group

    def _decode(self, texts: Sequence[list[int]]) -> list[list[float]]:
        """One pass of ``texts``, each its own sequence from position 0: their vectors."""
        batch = [
            BatchToken(token, position, sequence, True)
            for sequence, tokens in enumerate(texts)
            for position, token in enumerate(tokens)
        ]
        llama_cpp.llama_memory_clear(self._memory, True)
        status = llama_cpp.llama_decode(self._ctx, _filled(self._batch, batch))
        if status != 0:
            raise EngineError(f"llama.cpp failed to embed a batch (status {status})")
        if self._pool is None:
            pooled = [
                np.ctypeslib.as_array(
                    llama_cpp.llama_get_embeddings_seq(self._ctx, sequence), shape=(self._width,)
                ).astype(np.float64)
                for sequence in range(len(texts))
            ]
        else:
            states = np.ctypeslib.as_array(
                llama_cpp.llama_get_embeddings(self._ctx), shape=(len(batch), self._width)
            )
            starts = np.cumsum([0, *(len(tokens) for tokens in texts)])
            pooled = [
                self._pool(states[start:end].astype(np.float64))
                for start, end in itertools.pairwise(starts)
            ]
        return [_normalized(vector) for vector in pooled]

    def close(self) -> None:
        """Free the context and the model."""
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            llama_cpp.llama_model_free(self._model)
            self._ctx = self._model = None


def _normalized(vector: npt.NDArray[np.float64]) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector as it is)."""
    norm = float(np.linalg.norm(vector))
    scaled: list[float] = (vector / norm if norm > 0 else vector).tolist()
    return scaled
