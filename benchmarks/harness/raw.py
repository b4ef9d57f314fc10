"""The side the service is compared with: the bundled model in this process, llama-cpp-python.

Same settings as the service's defaults (the ``LocalEngine`` traits) and the same rendered prompt.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import llama_cpp

from lmsp_jupyter.engine.catalog import BUNDLED_MODEL_ID
from lmsp_jupyter.engine.generation import ChatMessage
from lmsp_jupyter.engine.local.engine import LocalEngine
from lmsp_jupyter.engine.local.llama.runtime import no_weight_repacking, release_compute_threads
from lmsp_jupyter.engine.templates import transcript

from .figures import Sample

DEFAULT_PROMPT = "Write a long story about a lighthouse keeper."


@dataclass(frozen=True)
class Settings:
    """The service's default model settings, read from the ``LocalEngine`` traits."""

    context_size: int
    threads: int
    batch_size: int

    @classmethod
    def service_defaults(cls) -> Settings:
        """The defaults ``jupyter lmsp`` runs with when given no configuration."""
        traits = LocalEngine.class_traits()
        return cls(
            context_size=traits["context_size"].default_value,
            threads=traits["threads"].default_value,
            batch_size=traits["batch_size"].default_value,
        )


def render_prompt(*turns: str) -> str:
    """The prompt text the service gives the bundled base model for a conversation of these
    turns (the user's, the model's, the user's, ...): its BOS token, then the plain transcript
    of ``engine/templates.py`` (one turn alone: its text as written)."""
    roles: tuple[Literal["user"], Literal["assistant"]] = ("user", "assistant")
    messages = [ChatMessage(role=roles[i % 2], content=turn) for i, turn in enumerate(turns)]
    return f"<bos>{transcript(messages)}"


class RawRunner:
    """The bundled model in this process, driven through llama-cpp-python's streaming API."""

    def __init__(self, model_path: Path, settings: Settings, prompt: str) -> None:
        with no_weight_repacking():  # loaded as the service loads it
            self.llm = llama_cpp.Llama(
                model_path=str(model_path),
                n_ctx=settings.context_size,
                n_threads=settings.threads,
                n_threads_batch=settings.threads,
                n_batch=settings.batch_size,
                verbose=False,
            )
        self.prompt_tokens = self.llm.tokenize(
            render_prompt(prompt).encode(), add_bos=False, special=True
        )

    def run(self, max_tokens: int) -> Sample:
        """Stream one completion, greedy; each chunk carrying a token counts as one token."""
        # Evaluate the whole prompt, as the service does for every request, rather than reuse
        # the cached prefix of the previous run.
        self.llm.reset()  # type: ignore[no-untyped-call]
        first, last = 0.0, 0.0
        pieces: list[str] = []
        start = time.perf_counter()
        stream = cast(
            "Iterator[dict[str, Any]]",
            self.llm.create_completion(
                prompt=self.prompt_tokens, max_tokens=max_tokens, temperature=0, stream=True
            ),
        )
        for count, chunk in enumerate(stream):  # each chunk but the closing one is a token
            now = time.perf_counter() - start
            if chunk["choices"][0]["finish_reason"] is not None:
                release_compute_threads()  # as the service's models do when idle
                return Sample(count, first, last, now, text="".join(pieces))
            first = first or now
            last = now
            pieces.append(chunk["choices"][0]["text"])
        raise RuntimeError("llama-cpp-python ended the stream without a closing chunk")


def build_info() -> str:
    """Which llama-cpp-python runs in this process: its version, interpreter and the CPU
    features its llama.cpp was built with and uses (``AVX2 = 1``, ``AVX512 = 1`` ...)."""
    features = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    return f"llama-cpp-python {llama_cpp.__version__} ({sys.executable}): {features}"


def print_context(
    settings: Settings, model_path: Path, prompt: str, tokens: int, rounds: int, prime: bool
) -> None:
    """The machine and settings the numbers belong to."""
    print(f"cpu_count            : {os.cpu_count()}")
    print(
        f"threads (gen/batch)  : {settings.threads}/{settings.threads} "
        f"(llama-cpp-python's own default: {max((os.cpu_count() or 2) // 2, 1)})"
    )
    print(f"n_ctx / n_batch      : {settings.context_size} / {settings.batch_size}")
    print(f"llama_cpp            : {llama_cpp.__version__}")
    print(f"model                : {BUNDLED_MODEL_ID} ({model_path.name})")
    print(f"prompt               : {prompt!r}")
    print(f"max tokens / rounds  : {tokens} / {rounds} (+1 warm-up each)")
    print(f"priming              : {'a one-token run before each' if prime else 'off'}")
