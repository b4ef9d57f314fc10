"""The route table of ``/lmsp/``: which handler serves which path.

The handlers are in :mod:`.handlers` (the service document, OpenAPI, the catch-all),
:mod:`.model_handlers`, :mod:`.response_handlers`, :mod:`.task_handlers` and
:mod:`.embedding_handlers`; every handler declares its operations (:mod:`.operations`), and the
OpenAPI document (:mod:`.openapi`) is built from this table.
"""

from __future__ import annotations

from .base import LmspHandler
from .embedding_handlers import EmbeddingsHandler
from .handlers import NotFoundHandler, OpenApiHandler, ServiceHandler
from .model_handlers import ModelHandler, ModelLoadHandler, ModelsHandler, ModelUnloadHandler
from .response_handlers import (
    ChatCompletionsHandler,
    CompletionsHandler,
    ResponseCancelHandler,
    ResponseHandler,
    ResponsesHandler,
)
from .task_handlers import TaskCancelHandler, TaskEventsHandler, TaskHandler, TasksHandler

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
