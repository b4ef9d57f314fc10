"""Engine failures as LMSP problems: the one mapping, for responses and for model loads."""

from __future__ import annotations

from ..engine.generation import EngineError, EngineUnavailable
from ..protocol.errors import LmspError

#: When a client may try again after ``engine_unavailable``: the next request asks the engine.
RETRY_UNAVAILABLE_SECONDS = 5


def engine_problem(error: EngineError) -> LmspError:
    """The problem of an engine failure. An engine that cannot serve the model (a remote server
    that does not answer, a model that cannot be loaded) is ``engine_unavailable``, with
    ``Retry-After`` where trying again can help; anything else is ``generation_failed``."""
    if isinstance(error, EngineUnavailable):
        retry_after = RETRY_UNAVAILABLE_SECONDS if error.retryable else None
        return LmspError("engine_unavailable", str(error), retry_after=retry_after)
    return LmspError("generation_failed", str(error))
