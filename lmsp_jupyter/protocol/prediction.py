"""Predicted outputs: text the caller expects the answer to be, mostly (OpenAI's Chat Completions
``prediction``, and ``extensions["x-lmsp-jupyter"]["prediction"]`` on LMSP responses), and the
switch that turns speculation off for one request. The text is the same with or without them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import LmspError
from .items import MAX_ITEMS, MAX_TEXT_CHARS
from .models import EXTENSION_KEY
from .requests import validate_request


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PredictionText(_Strict):
    """A text part of a prediction."""

    type: Literal["text"]
    text: str = Field(max_length=MAX_TEXT_CHARS)


class Prediction(_Strict):
    """``{"type": "content", "content": ...}``: the answer as the caller expects it (the code
    being edited, say); the engine verifies it a stretch at a time."""

    type: Literal["content"]
    content: (
        Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
        | Annotated[list[PredictionText], Field(max_length=MAX_ITEMS)]
    )

    def text(self) -> str:
        """The predicted text, its parts joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class Speculation(_Strict):
    """What a request asks of speculation under ``extensions["x-lmsp-jupyter"]``."""

    prediction: Prediction | None = None
    speculation: bool = True


def speculation_of(extensions: dict[str, Any] | None) -> Speculation:
    """The ``prediction`` and ``speculation`` of a request's own extension; a bad shape is
    ``invalid_request`` naming its ``param``."""
    own = (extensions or {}).get(EXTENSION_KEY)
    if not isinstance(own, dict):
        return Speculation()
    fields = {key: own[key] for key in ("prediction", "speculation") if key in own}
    try:
        return validate_request(Speculation, fields)
    except LmspError as exc:
        param = f"extensions.{EXTENSION_KEY}.{exc.param or ''}".rstrip(".")
        detail = str(exc.detail).removeprefix(f"{exc.param or 'body'}:")
        raise LmspError("invalid_request", f"{param}:{detail}", param=param) from None


class UsageExtension(BaseModel):
    """This service's additions to a response's usage, under ``extensions["x-lmsp-jupyter"]``."""

    accepted_draft_tokens: int = Field(
        0, description="Output tokens verified in one pass from a draft (predicted or guessed)."
    )
    accepted_prediction_tokens: int = Field(
        0, description="Tokens of the request's prediction the answer kept."
    )
    rejected_prediction_tokens: int = Field(
        0, description="Tokens of the request's prediction verified and not kept."
    )
