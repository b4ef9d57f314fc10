"""A model loaded for batched generation: its weights, one llama.cpp context of many sequences,
and the batches of tokens a pass evaluates."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from ...generation import EngineError, ModelLoadError, SamplingParams
from ...guidance import SchemaMatcher
from .runtime import KernelSwitch, model_output_tile, prepare_llama_cpp, unrepacked_model_params
from .sampler import TokenSampler


@dataclass(frozen=True)
class BatchToken:
    """One token of a batch: its id, its position, its sequence, and whether logits are kept."""

    token: int
    position: int
    sequence: int
    logits: bool


def filled(batch: Any, tokens: Sequence[BatchToken]) -> Any:
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
        self._kernels = KernelSwitch(self._ctx)
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
        status = llama_cpp.llama_decode(self._ctx, filled(self._batch, tokens))
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
