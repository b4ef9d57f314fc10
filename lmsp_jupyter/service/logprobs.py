"""The engine's token logprobs as the protocol carries them (OpenAI's shape)."""

from __future__ import annotations

from collections.abc import Sequence

from ..engine.generation import TokenLogprob
from ..protocol.logprobs import Logprob, TopLogprob


def wire_logprobs(entries: Sequence[TokenLogprob]) -> list[Logprob]:
    """``entries`` with each token's text (its bytes as UTF-8, a token that cuts a character
    in two shows U+FFFD) and its bytes."""
    return [
        Logprob(
            **_top(entry.token, entry.logprob).model_dump(),
            top_logprobs=[_top(token, logprob) for token, logprob in entry.top],
        )
        for entry in entries
    ]


def _top(token: bytes, logprob: float) -> TopLogprob:
    return TopLogprob(
        token=token.decode("utf-8", errors="replace"), logprob=logprob, bytes=list(token)
    )
