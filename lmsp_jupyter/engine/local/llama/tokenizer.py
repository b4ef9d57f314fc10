"""Tokenizing with llama.cpp: a vocabulary-only model, and the tokens of a text in a vocabulary."""

from __future__ import annotations

import ctypes
import warnings
from pathlib import Path
from typing import Any

import llama_cpp
from llguidance.llamacpp import lltokenizer_from_vocab

from ...generation import EngineError, ModelLoadError
from ...guidance import SchemaCompiler


def tokenize(vocab: Any, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
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
        return tokenize(self._vocab, text, add_special=False, parse_special=True)

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
