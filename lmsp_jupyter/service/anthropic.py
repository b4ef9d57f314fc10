"""The models of this service as Anthropic's clients name and list them: Claude Code asks
for ``claude-*`` names (a Haiku one for its background calls), which this owner maps onto
local models (:attr:`AnthropicModels.model_map`)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from traitlets import Dict, Unicode
from traitlets.config import LoggingConfigurable

from ..protocol.anthropic_answers import (
    AnthropicModel,
    AnthropicModelList,
    anthropic_model,
    model_list,
)
from ..protocol.errors import LmspError
from .models import ModelDirectory

#: The names that go to the default model unless ``model_map`` says otherwise.
CLAUDE_NAMES = "claude-*"


class AnthropicModels(LoggingConfigurable):
    """Resolves the model names of Anthropic's Messages API and lists the models in its shape."""

    model_map = Dict(
        key_trait=Unicode(),
        value_trait=Unicode(),
        default_value={},
        help="Which local model answers a model name of Anthropic's Messages API "
        "(/lmsp/anthropic): a name or a shell-style pattern (claude-*haiku*) → a model id. "
        "A local model's own id always names it; any other claude-* name goes to the default "
        "model (LmspApp.default_model, else the first generation model found).",
    ).tag(config=True)

    def __init__(self, models: ModelDirectory, default_model: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.models = models
        self.default_model = default_model

    def resolve(self, name: str) -> str:
        """The local model id ``name`` means: a model's own id, the first entry of
        ``model_map`` whose name or pattern matches it, or for a ``claude-*`` name the
        default model; anything else → ``model_not_found``."""
        if self._known(name):
            return name
        for pattern, model_id in self.model_map.items():
            if pattern == name or fnmatchcase(name, pattern):
                return str(model_id)
        if fnmatchcase(name, CLAUDE_NAMES):
            return self._default()
        raise LmspError("model_not_found", f"model: {name}", param="model")

    def _known(self, model_id: str) -> bool:
        try:
            self.models.entry(model_id)
        except LmspError as error:
            if error.code != "model_not_found":
                raise
            return False
        return True

    def _default(self) -> str:
        """The model that answers a ``claude-*`` name nothing else maps."""
        if self.default_model:
            return self.default_model
        for model in self.models.list().data:
            if "streaming" in model.capabilities:
                return model.id
        raise LmspError("model_not_found", "no model to answer claude-* names", param="model")

    def listing(self) -> AnthropicModelList:
        """The generation models, as ``GET /v1/models`` lists them."""
        return model_list(
            [
                anthropic_model(model.id, model.id, model.created)
                for model in self.models.list().data
                if "streaming" in model.capabilities
            ]
        )

    def get(self, name: str) -> AnthropicModel:
        """One model by any name :meth:`resolve` takes, shown under that name."""
        model = self.models.get(self.resolve(name))
        display = model.id if name == model.id else f"{name} (local model {model.id})"
        return anthropic_model(name, display, model.created)
