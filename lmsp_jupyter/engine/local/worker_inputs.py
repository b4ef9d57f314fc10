"""What a model's worker is given: how to run the model, and the requests it generates."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..generation import CancelToken, GenerationEvent, Prompt, SamplingParams
from ..guidance import SchemaMatcher

#: Sequences per model decoding together, by default. Each has a KV cache of the whole context
#: (the bundled model at 8192 tokens, ``benchmarks/model_memory.py``: 1,155 MB resident with 4,
#: 1,767 MB with 8; an 8B model takes about 1 GB a sequence), while 8 slots raise the aggregate
#: rate of 8 streams by a fifth on 2 cores (``benchmarks/serving.py``), as llama-server's own
#: default of 4 slots assumes too; a server with more memory raises
#: ``LocalEngine.parallel_requests``.
DEFAULT_PARALLEL = 4


@dataclass(frozen=True)
class EngineSettings:
    """How models are loaded and run: the engine's (``LocalEngine``'s traits, whose defaults
    these are), and one model's worker's, with ``context_size`` that model's window."""

    #: The window each request must fit in (0 for the engine: each model's trained one); a
    #: worker's KV cache holds as many tokens, shared.
    context_size: int = 8192
    threads: int = os.cpu_count() or 1
    batch_size: int = 512
    #: Sequences of one model decoding at once; more requests wait.
    parallel: int = DEFAULT_PARALLEL
    #: Whether sequences verify drafted tokens (predicted, or from their context) in one pass
    #: (``engine/local/speculation.py``); the text is the same either way.
    speculation: bool = True


@dataclass(frozen=True)
class GenerationRequest:
    """What a consumer asks the worker for, and where its events go (from the worker thread)."""

    prompt: Prompt
    params: SamplingParams
    cancel: CancelToken
    emit: Callable[[GenerationEvent | BaseException], None]
    #: Where the sequence stands in ``params.schema``, when it has one.
    matcher: SchemaMatcher | None = None
    #: The tokens of the text the caller expects the answer to be (``SamplingParams.prediction``).
    prediction: tuple[int, ...] = ()
