"""The route tables: which handler serves which path of LMSP, of Ollama's API and of
Anthropic's Messages API.

LMSP's handlers are in :mod:`.document_handlers` (the service document, OpenAPI, the
catch-all), :mod:`.model_handlers`, :mod:`.response_handlers`, :mod:`.task_handlers` and
:mod:`.embedding_handlers`; every one declares its operations (:mod:`.operations`), and the
OpenAPI document (:mod:`.openapi`) is built from :data:`default_handlers`. Ollama's are in
:mod:`.ollama_handlers`, served on the Jupyter port and on the opt-in listener
(:mod:`.ollama_listener`). Anthropic's Messages API is in :mod:`.anthropic_handlers`.
"""

from __future__ import annotations

from . import anthropic_handlers as anthropic
from . import ollama_handlers as ollama
from .base import LmspHandler
from .document_handlers import NotFoundHandler, OpenApiHandler, ServiceHandler
from .embedding_handlers import EmbeddingsHandler
from .model_handlers import (
    McpServersHandler,
    ModelHandler,
    ModelLoadHandler,
    ModelsHandler,
    ModelUnloadHandler,
)
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
    (r"/lmsp/v1/mcp/servers/?", McpServersHandler),
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

#: What the opt-in Ollama listener offers: model listing and generation, nothing else.
ollama_listener_handlers: list[tuple[str, type[ollama.OllamaHandler]]] = [
    (r"/?", ollama.RootHandler),
    (r"/api/version", ollama.VersionHandler),
    (r"/api/tags", ollama.TagsHandler),
    (r"/api/show", ollama.ShowHandler),
    (r"/api/ps", ollama.PsHandler),
    (r"/api/chat", ollama.ChatHandler),
    (r"/api/generate", ollama.GenerateHandler),
    (r"/api/embed", ollama.EmbedHandler),
    (r"/api/embeddings", ollama.EmbeddingsHandler),
    (r"(/.*)", ollama.OllamaNotFoundHandler),
]

#: Ollama's API on the Jupyter port, mounted before LMSP's catch-all of ``/lmsp/``.
ollama_handlers: list[tuple[str, type[ollama.OllamaHandler]]] = [
    *[(ollama.OLLAMA_PREFIX + path, handler) for path, handler in ollama_listener_handlers[:-1]],
    (ollama.OLLAMA_PREFIX + r"/api/(pull|push|create|copy|delete)", ollama.ModelStoreHandler),
    (ollama.OLLAMA_PREFIX + r"(/.*)", ollama.OllamaNotFoundHandler),
]

#: Anthropic's Messages API on the Jupyter port, mounted before LMSP's catch-all of ``/lmsp/``.
anthropic_handlers: list[tuple[str, type[anthropic.AnthropicHandler]]] = [
    (anthropic.ANTHROPIC_PREFIX + r"/v1/messages", anthropic.MessagesHandler),
    (anthropic.ANTHROPIC_PREFIX + r"/v1/messages/count_tokens", anthropic.CountTokensHandler),
    (anthropic.ANTHROPIC_PREFIX + r"/v1/models", anthropic.ModelsHandler),
    (anthropic.ANTHROPIC_PREFIX + r"/v1/models/([^/]+)", anthropic.ModelHandler),
    (anthropic.ANTHROPIC_PREFIX + r"(/.*)?", anthropic.AnthropicNotFoundHandler),
]
