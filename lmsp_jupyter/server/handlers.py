"""The ``/lmsp/v1`` routes: the service document, the models, and the route table.

The handlers of responses and of tasks are in :mod:`.response_handlers` and
:mod:`.task_handlers`; every handler declares its operations (:mod:`.operations`), and the
OpenAPI document is built from :data:`default_handlers`.
"""

from __future__ import annotations

from typing import get_args

from .. import __version__
from ..protocol.errors import LmspError
from ..protocol.models import AuthInfo, Capability, ServiceDocument, ServiceInfo
from .auth import JUPYTER_SCOPES
from .base import LmspHandler
from .embedding_handlers import EmbeddingsHandler
from .openapi import OpenApiHandler
from .operations import Operation, json_reply, ref
from .response_handlers import (
    ChatCompletionsHandler,
    CompletionsHandler,
    ResponseCancelHandler,
    ResponseHandler,
    ResponsesHandler,
)
from .task_handlers import TaskCancelHandler, TaskEventsHandler, TaskHandler, TasksHandler


class ServiceHandler(LmspHandler):
    """``GET /lmsp/v1``: the service document."""

    operations = {
        "get": Operation(
            "getService",
            "The service document: version, capabilities, scopes",
            "service",
            {"200": json_reply(ref("ServiceDocument"), "The service document.")},
        )
    }

    def get(self) -> None:
        document = ServiceDocument(
            service=ServiceInfo(name="lmsp-jupyter", version=__version__),
            capabilities=list(get_args(Capability)),  # every one LMSP 1.0 defines
            auth=AuthInfo(scopes=sorted(JUPYTER_SCOPES)),
        )
        self.write_model(document)


class ModelsHandler(LmspHandler):
    """``GET /lmsp/v1/models``: every model found on this machine."""

    operations = {
        "get": Operation(
            "listModels",
            "List the models on this machine",
            "models",
            {"200": json_reply(ref("ModelList"), "The models.")},
            scope="models:read",
        )
    }

    async def get(self) -> None:
        self.write_model(await self.models.listing())


class ModelHandler(LmspHandler):
    """``GET /lmsp/v1/models/{model_id}``: one model."""

    operations = {
        "get": Operation(
            "getModel",
            "One model",
            "models",
            {"200": json_reply(ref("Model"), "The model.")},
            scope="models:read",
            errors=(404,),
        )
    }

    def get(self, model_id: str) -> None:
        self.write_model(self.models.get(model_id))  # Tornado has percent-decoded it


class ModelLoadHandler(LmspHandler):
    """``POST /lmsp/v1/models/{model_id}/load``: load a model now; the model once loaded."""

    operations = {
        "post": Operation(
            "loadModel",
            "Load a model now, unloading idle ones if it does not fit otherwise",
            "models",
            {"200": json_reply(ref("Model"), "The model, loaded.")},
            scope="models:write",
            errors=(404, 503),
        )
    }

    async def post(self, model_id: str) -> None:
        self.write_model(await self.models.load(model_id))


class ModelUnloadHandler(LmspHandler):
    """``POST /lmsp/v1/models/{model_id}/unload``: unload an idle model; the model after."""

    operations = {
        "post": Operation(
            "unloadModel",
            "Unload a model that nothing runs on (a model that is not loaded stays so)",
            "models",
            {"200": json_reply(ref("Model"), "The model, unloaded.")},
            scope="models:write",
            errors=(404, 409),
        )
    }

    async def post(self, model_id: str) -> None:
        self.write_model(await self.models.unload(model_id))


class NotFoundHandler(LmspHandler):
    """Any other path under ``/lmsp/``."""

    def get(self, path: str | None = None) -> None:
        raise LmspError("not_found", f"no LMSP endpoint at {self.request.path}")

    head = post = put = patch = delete = get


#: The LMSP routes; the extension app puts the server's base_url before each.
default_handlers: list[tuple[str, type[LmspHandler]]] = [
    (r"/lmsp/v1/?", ServiceHandler),
    (r"/lmsp/v1/models/?", ModelsHandler),
    (r"/lmsp/v1/models/(.+)/load", ModelLoadHandler),
    (r"/lmsp/v1/models/(.+)/unload", ModelUnloadHandler),
    (r"/lmsp/v1/models/(.+)", ModelHandler),
    (r"/lmsp/v1/responses/?", ResponsesHandler),
    (r"/lmsp/v1/responses/([^/]+)", ResponseHandler),
    (r"/lmsp/v1/responses/([^/]+)/cancel", ResponseCancelHandler),
    (r"/lmsp/v1/chat/completions/?", ChatCompletionsHandler),
    (r"/lmsp/v1/completions/?", CompletionsHandler),
    (r"/lmsp/v1/embeddings/?", EmbeddingsHandler),
    (r"/lmsp/v1/tasks/?", TasksHandler),
    (r"/lmsp/v1/tasks/([^/]+)", TaskHandler),
    (r"/lmsp/v1/tasks/([^/]+)/cancel", TaskCancelHandler),
    (r"/lmsp/v1/tasks/([^/]+)/events", TaskEventsHandler),
    (r"/lmsp/v1/openapi.json", OpenApiHandler),
    (r"/lmsp(/.*)?", NotFoundHandler),
]
