"""The only code that touches llama_cpp: one loaded model, used from one thread only."""

from __future__ import annotations

import codecs
import ctypes
import logging
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llguidance.llamacpp import lltokenizer_from_vocab

from .generation import (
    CancelToken,
    EngineError,
    GenerationDone,
    GenerationEvent,
    Prompt,
    SamplingParams,
    StopReason,
    TextDelta,
)
from .guidance import SchemaCompiler, SchemaMatcher

# llama.cpp logs through this logger; below ERROR it floods the server's stderr.
logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)

#: Sampling when a request gives no temperature: llama.cpp's own defaults.
DEFAULT_TEMPERATURE = 0.8
_TOP_K = 40
_TOP_P = 0.95
_MIN_P = 0.05


_DEFAULT_MODEL_PARAMS = llama_cpp.llama_cpp.llama_model_default_params
_PARAMS_LOCK = threading.Lock()


@contextmanager
def no_weight_repacking() -> Iterator[None]:
    """Load models without llama.cpp's extra buffer types (weights repacked for AMX or wider
    SIMD): on CPUs with AMX the repacked matrix product crashes llama.cpp's decode, and
    repacking makes logits depend on the batch shape. ``Llama`` has no switch for it, so its
    default model parameters are swapped while it loads. Everything that loads the bundled
    model in-process (benchmarks, test references, a third-party server) loads it this way."""

    def params() -> Any:
        defaults = _DEFAULT_MODEL_PARAMS()
        defaults.use_extra_bufts = False
        return defaults

    with _PARAMS_LOCK:
        llama_cpp.llama_cpp.llama_model_default_params = params
        try:
            yield
        finally:
            llama_cpp.llama_cpp.llama_model_default_params = _DEFAULT_MODEL_PARAMS


class LlamaTokenizer:
    """A vocabulary-only llama.cpp model: tokenizes prompts without the weights in memory."""

    def __init__(self, path: Path) -> None:
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            raise EngineError(f"the tokenizer of {path.name} could not be loaded")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.bos_token = self._token_text(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos_token = self._token_text(llama_cpp.llama_vocab_eos(self._vocab))
        self._schemas: SchemaCompiler | None = None

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        buffer = ctypes.create_string_buffer(256)
        size = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, len(buffer), 0, True)
        return buffer.raw[: max(size, 0)].decode("utf-8", errors="replace")

    def tokenize(self, text: str) -> list[int]:
        """Tokens of a rendered prompt; special tokens in it are parsed as such."""
        data = text.encode()
        capacity = len(data) + 8
        tokens = (llama_cpp.llama_token * capacity)()
        count = llama_cpp.llama_tokenize(
            self._vocab, data, len(data), tokens, capacity, False, True
        )
        if count < 0:
            raise EngineError("the prompt could not be tokenized")
        return list(tokens[:count])

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


class LlamaRunner:
    """A model loaded for generation. Every call must come from the model's worker thread."""

    def __init__(self, path: Path, *, context_size: int, threads: int, batch_size: int) -> None:
        try:
            with no_weight_repacking():
                self._llm = llama_cpp.Llama(
                    model_path=str(path),
                    n_ctx=context_size,
                    n_batch=min(batch_size, context_size),
                    n_threads=threads,
                    n_threads_batch=threads,
                    n_gpu_layers=0,
                    verbose=False,
                )
        except (ValueError, RuntimeError, OSError) as exc:
            raise EngineError(f"{path.name} could not be loaded") from exc
        self._vocab = self._llm._model.vocab
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        # llama.cpp rounds its context up (to a multiple of 256); the window callers were
        # promised is the one asked for, so that is the one generation keeps to.
        self.context_size = context_size

    def close(self) -> None:
        """Free the model and its context (their memory goes back to the system)."""
        self._llm.close()

    def generate(
        self,
        prompt: Prompt,
        params: SamplingParams,
        cancel: CancelToken,
        emit: Callable[[GenerationEvent], None],
        matcher: SchemaMatcher | None = None,
    ) -> None:
        """Generate from ``prompt``, calling ``emit`` per text delta and once at the end.

        With a ``matcher`` every token keeps to its schema, checked lazily: a sampled token
        it allows is kept, otherwise the logits are masked and the token sampled again (the
        same token as masking first, at temperature 0). Tokens the schema forces are appended
        without sampling, and generation ends once the JSON is whole.
        """
        limit = min(params.max_tokens, self.context_size - len(prompt.tokens))
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        count = 0
        reason: StopReason = "stop"
        # A full re-evaluation keeps temperature 0 deterministic: reusing a cached prefix
        # changes llama.cpp's batch shapes and with them the last bits of the logits.
        self._llm.reset()  # type: ignore[no-untyped-call]
        temperature = DEFAULT_TEMPERATURE if params.temperature is None else params.temperature
        sampler = self._llm._init_sampler(
            top_k=_TOP_K, top_p=_TOP_P, min_p=_MIN_P, temp=temperature
        )
        pending = list(prompt.tokens)
        while True:
            if cancel.cancelled:
                reason = "cancelled"
                break
            self._llm.eval(pending)
            pending = (matcher.forced() if matcher else []) or [self._sample(sampler, matcher)]
            if llama_cpp.llama_vocab_is_eog(self._vocab, pending[0]):
                break
            for token in pending[: limit - count]:
                if matcher is not None:
                    matcher.accept(token)
                count += 1
                text = decoder.decode(self._llm.detokenize([token]))
                if text:
                    emit(TextDelta(text))
            if cancel.cancelled:
                reason = "cancelled"
                break
            if count >= limit:
                reason = "max_tokens" if count >= params.max_tokens else "context_length"
                break
            if matcher is not None and matcher.finished():
                break
        tail = decoder.decode(b"", final=True)
        if tail:
            emit(TextDelta(tail))
        emit(GenerationDone(reason=reason, prompt_tokens=len(prompt.tokens), output_tokens=count))

    def _sample(self, sampler: Any, matcher: SchemaMatcher | None) -> int:
        """The next token: sampled, and if the matcher refuses it, sampled again from the
        logits masked in place (llama.cpp's own buffer, which the sampler reads)."""
        context = self._llm._ctx
        token: int = sampler.sample(context, -1)
        if matcher is not None and not matcher.allows(token):
            pointer = context.get_logits_ith(-1)
            matcher.mask_logits(np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)))
            token = sampler.sample(context, -1)
        return token
