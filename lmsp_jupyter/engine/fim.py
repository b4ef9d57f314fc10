"""Fill-in-the-middle: which models can fill a gap, and the prompt that asks them to.

Code models trained for it (CodeGemma, Qwen2.5-Coder, StarCoder2, DeepSeek-Coder, ...) name
three special tokens in their GGUF metadata, as llama.cpp reads them:
``tokenizer.ggml.fim_pre_token_id``, ``fim_suf_token_id`` and ``fim_mid_token_id``. Given the
text before the cursor and the text after it, the prompt is *prefix-suffix-middle*, the order
llama.cpp's ``/infill`` uses::

    [BOS] <FIM_PRE> prefix <FIM_SUF> suffix <FIM_MID>

and the model writes the middle. Every raw completion with a ``suffix`` (OpenAI's Completions,
Ollama's ``/api/generate``) is assembled here. Nothing here depends on llama.cpp.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["FIM_KEYS", "FimTokens", "fim_tokens", "raw_prompt_tokens"]

#: The GGUF keys of the three tokens, in the order of :class:`FimTokens`' fields.
FIM_KEYS = (
    "tokenizer.ggml.fim_pre_token_id",
    "tokenizer.ggml.fim_suf_token_id",
    "tokenizer.ggml.fim_mid_token_id",
)


@dataclass(frozen=True)
class FimTokens:
    """The ids of a model's fill-in-the-middle tokens."""

    prefix: int
    suffix: int
    middle: int


def fim_tokens(values: Mapping[str, object]) -> FimTokens | None:
    """The FIM tokens a GGUF's metadata ``values`` name; ``None`` unless it names all three."""
    ids = [values.get(key) for key in FIM_KEYS]
    found = [i for i in ids if isinstance(i, int) and not isinstance(i, bool) and i >= 0]
    return FimTokens(*found) if len(found) == len(FIM_KEYS) else None


def raw_prompt_tokens(
    tokenize: Callable[[str], list[int]],
    prompt: str,
    suffix: str | None,
    *,
    bos: int | None,
    fim: FimTokens | None,
) -> list[int]:
    """The tokens of a raw completion of ``prompt`` (no chat template), with ``bos`` first when
    the model starts its text with one.

    With a ``suffix`` (even an empty one: the gap is at the end) and ``fim`` tokens the model
    fills in the middle (prefix-suffix-middle); without FIM tokens the suffix is left out and
    the model continues ``prompt`` alone.
    """
    start = [] if bos is None else [bos]
    if suffix is None or fim is None:
        return [*start, *tokenize(prompt)]
    return [
        *start,
        fim.prefix,
        *tokenize(prompt),
        fim.suffix,
        *tokenize(suffix),
        fim.middle,
    ]
