"""A model loaded to embed text: pooled, normalized vectors of many texts a pass."""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import llama_cpp
import llama_cpp._ggml  # the libggml llama-cpp-python loaded, for ggml_get_name
import numpy as np
import numpy.typing as npt

from ...generation import EngineError, ModelLoadError
from .model import BatchToken, filled
from .runtime import (
    prepare_llama_cpp,
    release_compute_threads,
    unrepacked_model_params,
    use_reference_kernels,
)
from .tokenizer import tokenize


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
        return tokenize(self._vocab, text, add_special=True, parse_special=False)

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
        status = llama_cpp.llama_decode(self._ctx, filled(self._batch, batch))
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
