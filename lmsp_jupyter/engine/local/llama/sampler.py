"""Picking a sequence's next tokens: llama.cpp's sampler chain, a schema's matcher, penalties and
logprobs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import llama_cpp
import numpy as np

from ...generation import SamplingParams, TokenLogprob
from ...guidance import SchemaMatcher
from ..logits import Penalties, TokenLogprobs

if TYPE_CHECKING:
    from .model import LlamaModel

#: Sampling when a request gives no temperature: llama.cpp's own defaults.
DEFAULT_TEMPERATURE = 0.8
_TOP_K = 40
_TOP_P = 0.95
_MIN_P = 0.05


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
