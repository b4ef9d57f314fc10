"""What the engine takes and yields: prompts, sampling settings, generation events."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class ChatMessage:
    """One turn of a conversation, as chat templates see it."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    #: An assistant turn's calls: ``{"id", "type": "function", "function": {"name", "arguments"}}``.
    tool_calls: tuple[dict[str, Any], ...] = ()
    #: A tool turn's answer to this call id.
    tool_call_id: str | None = None

    def as_template_dict(self) -> dict[str, Any]:
        """The message as chat templates expect it (the Hugging Face convention)."""
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = list(self.tool_calls)
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call, as chat templates see it."""

    name: str
    description: str | None
    parameters: dict[str, Any]

    def as_template_dict(self) -> dict[str, Any]:
        """The tool in the OpenAI-style shape templates iterate over."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt and its tokens.

    A remote engine renders prompts itself: its prompt carries the messages and tools to send,
    with no text and no tokens, but an upper ``bound`` of their count and a ``counter`` that
    asks the server for a closer one.
    """

    text: str
    tokens: list[int] = field(repr=False)
    messages: tuple[ChatMessage, ...] = field(default=(), repr=False)
    tools: tuple[ToolSpec, ...] = field(default=(), repr=False)
    #: At least as many tokens as the prompt has, when it has no ``tokens`` (a remote prompt).
    bound: int | None = None
    #: Counts the prompt's tokens where they are rendered (a remote server): the count, and
    #: whether it is exact (``False``: an estimate that errs high).
    counter: Callable[[], Awaitable[tuple[int, bool]]] | None = field(
        default=None, repr=False, compare=False
    )
    #: A raw text continued as it is, through no chat template (``render_text``).
    raw: bool = False
    #: The text after the gap of a raw fill-in-the-middle prompt, for an engine that assembles
    #: it elsewhere (a remote server); a local one has it in ``tokens`` already.
    suffix: str | None = field(default=None, repr=False)
    #: Where, in ``tokens``, the part that the next prompts of its kind change starts, when
    #: that is known: a conversation's first answer (its first turn's prompt ends there), a
    #: fill-in-the-middle prompt's gap (the cursor). A local engine reads no block of the
    #: prompt past it, so the next prompts find the blocks before it in the cache
    #: (``engine/local/passes.py``).
    stable_until: int | None = None

    @property
    def length(self) -> int:
        """The prompt's tokens, or the upper bound of a prompt rendered elsewhere."""
        return self.bound if self.bound is not None else len(self.tokens)


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens: ``temperature`` 0 is greedy; ``None`` is the engine's default."""

    max_tokens: int
    temperature: float | None = None
    #: Nucleus, top-k and min-p filtering; ``None`` is the engine's default.
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    #: Makes sampling at temperature > 0 repeatable.
    seed: int | None = None
    #: Text that ends generation; it never reaches the output, not even in part.
    stop: tuple[str, ...] = ()
    #: A JSON Schema the generated text must be an instance of, enforced while decoding (the
    #: answer's schema, or for a forced call the ``{"name", "arguments"}`` envelope).
    schema: dict[str, Any] | None = None
    #: The tools one of which must be called (``schema`` is then their call envelope).
    forced_tools: tuple[str, ...] = ()
    #: OpenAI's penalties over the tokens generated so far: before each draw, a token's logit
    #: is lowered by ``frequency_penalty`` times the times it was generated, and by
    #: ``presence_penalty`` once it was (negative values raise it).
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    #: Report each output token's logprob and this many most likely alternatives (0-20);
    #: ``None``: no logprobs (computing them costs a pass over the vocabulary per token).
    top_logprobs: int | None = None
    #: Text the answer is expected to be, mostly (OpenAI's predicted outputs): the engine may
    #: verify it a stretch at a time instead of generating token by token; the answer is the
    #: same.
    prediction: str | None = None
    #: Whether the engine may verify drafted tokens (predicted or from the context) at all.
    speculation: bool = True


@dataclass(frozen=True)
class TokenLogprob:
    """One output token's log-probability in the distribution it was drawn from (after the
    penalties, before temperature and the top-k/top-p/min-p cut; under a schema, masked to the
    tokens it allows), and the most likely tokens of that distribution, most likely first."""

    token: bytes
    logprob: float
    top: tuple[tuple[bytes, float], ...] = ()


@dataclass(frozen=True)
class TextDelta:
    """Text the model produced since the last event."""

    text: str
    #: The tokens that produced it, when logprobs were asked for (``SamplingParams.top_logprobs``).
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class ReasoningDelta:
    """Reasoning an engine reports apart from the text (a remote server's
    ``reasoning_content``), produced since the last event."""

    text: str


StopReason = Literal["stop", "max_tokens", "context_length", "cancelled"]


@dataclass(frozen=True)
class GenerationDone:
    """Generation ended; always the last event."""

    reason: StopReason
    prompt_tokens: int
    output_tokens: int
    #: Prompt tokens served from a cached prefix instead of being evaluated.
    cached_tokens: int = 0
    #: Output tokens that came from drafts verified in one pass (predicted or from the context).
    accepted_draft_tokens: int = 0
    #: Tokens of the prediction (``SamplingParams.prediction``) verified and kept, and
    #: verified and not kept.
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a function call an engine reports apart from the text (remote servers'
    ``tool_calls``): the call at ``index`` gets its ``name`` first, then argument text."""

    index: int
    name: str | None = None
    arguments: str = ""


GenerationEvent = TextDelta | ReasoningDelta | ToolCallDelta | GenerationDone


class GrammarError(ValueError):
    """A schema the decoder cannot enforce."""


class EngineError(Exception):
    """The model could not be loaded or failed while generating."""


class EngineUnavailable(EngineError):
    """The engine serving the model (a remote server) does not answer."""

    #: Whether asking again later can succeed without anyone changing anything.
    retryable = True


class ModelLoadError(EngineUnavailable):
    """The model could not be loaded (a damaged or unsupported file, too little memory for its
    contexts): nothing serves it until that changes."""

    retryable = False


class CancelToken:
    """A flag the generating thread checks between tokens."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask generation to stop after the current token."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether cancellation was asked for."""
        return self._event.is_set()
