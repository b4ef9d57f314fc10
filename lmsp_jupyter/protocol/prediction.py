"""Predicted outputs: text the caller expects the answer to be, mostly (OpenAI's Chat Completions
``prediction``, and ``extensions["x-lmsp-jupyter"]["prediction"]`` on LMSP responses), and the
switch that turns speculation off for one request. The text is the same with or without them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .chat import Prediction
from .errors import LmspError
from .models import EXTENSION_KEY
from .requests import validate_request


class Speculation(BaseModel):
    """What a request asks of speculation under ``extensions["x-lmsp-jupyter"]``."""

    model_config = ConfigDict(strict=True)

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
