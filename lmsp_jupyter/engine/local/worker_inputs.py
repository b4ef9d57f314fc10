"""What a model's worker is given: how to run the model, and the requests it generates."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..generation import CancelToken, GenerationEvent, Prompt, SamplingParams
from ..guidance import SchemaMatcher


@dataclass(frozen=True)
class WorkerSettings:
    """How one model is loaded and run."""

    #: The window each request must fit in; the KV cache holds as many tokens, shared.
    context_size: int
    parallel: int
    threads: int
    batch_size: int
    #: Whether sequences verify drafted tokens (``engine/speculation.py``).
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
