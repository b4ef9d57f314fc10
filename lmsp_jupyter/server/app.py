"""The jupyter-server extension ``lmsp``: settings, wiring, and ``jupyter lmsp``."""

from __future__ import annotations

import ast
import logging
import os
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import (
    Bool,
    Dict,
    Enum,
    Float,
    Int,
    List,
    Type,
    Unicode,
    default,
)

from ..engine.backend import GenerationBackend
from ..engine.catalog import (
    ModelCatalog,
    default_huggingface_cache_dir,
    default_ollama_dir,
)
from ..engine.embedding import Embedders
from ..engine.local.engine import LocalEngine
from ..engine.local.llama.embedder import LlamaEmbedder
from ..engine.local.worker_inputs import EngineSettings
from ..engine.manager import ModelManager
from ..engine.router import EngineRouter
from ..protocol.environment import (
    HUB_TOKEN_VARIABLE,
    HUB_URL_VARIABLE,
    MODEL_VARIABLE,
    ROOT_VARIABLE,
    TOKEN_VARIABLE,
    URL_VARIABLE,
)
from ..service.anthropic import AnthropicModels
from ..service.embeddings import EmbeddingService
from ..service.limits import OwnerLimits
from ..service.mcp import McpServers
from ..service.models import ModelDirectory
from ..service.responses import ResponseService
from ..service.store.records import ResponseRecords, UsageRecords
from .auth import ScopedTokens
from .forward import HubForward, forward_handlers
from .hub import hub_access, hub_service_argv, usage_handlers
from .ollama_listener import ListenerError, OllamaListener
from .openapi import openapi_json
from .routes import anthropic_handlers, default_handlers, ollama_handlers
from .sse import SLOW_CLIENT_SECONDS
from .task_store import TaskStore


class PathList(List[str]):
    """A list of paths, as users type them: a JSON list, one path, or the option repeated.

    ``--LmspApp.model_dirs='["~/a", "~/b"]'``, ``--LmspApp.model_dirs=~/a`` (repeated for
    more) and, in a config file, a list or a single string all work.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(Unicode(), default_value=[], **kwargs)

    def from_string_list(self, s_list: list[str]) -> list[str]:
        """The paths of the command line's values (each a path or a list of paths)."""
        return [path for value in s_list for path in _paths(value)]

    def from_string(self, s: str) -> list[str]:
        """The paths of one command-line value."""
        return _paths(s)

    def validate(self, obj: Any, value: Any) -> Any:
        """A single string is a list of one path."""
        return super().validate(obj, [value] if isinstance(value, str) else value)


def _paths(value: str) -> list[str]:
    """``'["~/a", "~/b"]'`` (JSON or Python) → both paths; anything else is one path."""
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return [value]
        if isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
            return parsed
    return [value]


class LmspApp(ExtensionApp):
    """Serves LMSP 1.0 under ``{base_url}lmsp/v1`` from the GGUF models on this machine."""

    name = "lmsp"
    classes = [
        *ExtensionApp.classes,
        LocalEngine,
        ModelManager,
        EngineRouter,
        TaskStore,
        AnthropicModels,
        McpServers,
    ]
    description = "LMSP 1.0: local language models served from the Jupyter server."
    load_other_extensions = True
    _ollama_listener: OllamaListener | None = None
    _forward: HubForward | None = None

    model_dirs = PathList(
        help="Directories searched (recursively) for .gguf model files: "
        """--LmspApp.model_dirs='["~/models", "/data/gguf"]', or one directory per """
        "--LmspApp.model_dirs=~/models. The log and the side panel say when one does not "
        "exist or holds no .gguf file.",
    ).tag(config=True)

    engine_class = Type(
        default_value=LocalEngine,
        klass=GenerationBackend,
        help="The class that runs the local models (the in-process llama.cpp engine by "
        "default), built as engine_class(parent=LmspApp, log=...): it implements "
        "lmsp_jupyter.engine.backend.GenerationBackend, and a LoggingConfigurable one reads "
        "its own settings from the Jupyter config (LocalEngine.context_size, ...).",
    ).tag(config=True)

    model_manager_class = Type(
        default_value=ModelManager,
        klass=ModelManager,
        help="The class that decides which models stay in memory, built as "
        "model_manager_class(engine, embedders=..., parent=LmspApp, log=...): it reads its "
        "settings (ModelManager.keep_alive_seconds, ...) from the Jupyter config.",
    ).tag(config=True)

    ollama_dir = Unicode(
        help="An Ollama model store (manifests/ and blobs/) whose models are offered too. "
        "Default: $OLLAMA_MODELS or ~/.ollama/models. Empty string: do not look.",
    ).tag(config=True)

    huggingface_cache_dir = Unicode(
        help="A Hugging Face hub cache whose .gguf files are offered too. "
        "Default: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub. Empty: do not look.",
    ).tag(config=True)

    default_model = Unicode(
        "",
        help="The model %lmsp ask uses without --model: the kernels this server starts "
        "inherit it as $LMSP_MODEL. Empty: the first loaded model, else the first listed.",
    ).tag(config=True)

    max_body_bytes = Int(
        8 * 1024 * 1024, help="Largest request body accepted; larger → 413 payload_too_large."
    ).tag(config=True)

    sse_keepalive_seconds = Float(
        15.0, help="Idle seconds after which an event stream sends a ': keep-alive' comment."
    ).tag(config=True)

    slow_client_seconds = Float(
        SLOW_CLIENT_SECONDS,
        help="Seconds a stream's client may take no data before it is dropped (it can resume "
        "a task's events from its last event id); bounds what a stalled reader holds.",
    ).tag(config=True)

    max_queued_tasks = Int(
        64,
        help="Requests (tasks and direct ones) waiting for a model, all models together; "
        "more → 503 overloaded.",
    ).tag(config=True)

    tokens = List(
        Dict(),
        default_value=[],
        help="Tokens besides the Jupyter server's own, each an owner of its own tasks and "
        "responses: [{'name': 'editor', 'sha256': '<hex SHA-256 of the token>', "
        "'scopes': ['models:read', 'responses:write']}]. Only the hash is configured.",
    ).tag(config=True)

    hub_service = Bool(
        False,
        help="Run as a JupyterHub service (jupyter lmsp --hub-service sets it, with where to "
        "listen from the hub's JUPYTERHUB_* environment): callers are the hub's users, by "
        "their hub token or the hub's OAuth login; each owns its own tasks and responses, and "
        "users with the hub scope custom:lmsp:admin see everyone's. See docs/jupyterhub.md.",
    ).tag(config=True)

    hub_service_url = Unicode(
        help="In a JupyterHub user's server: the LMSP root of the hub's shared service "
        "(default: $LMSP_HUB_SERVICE_URL, which c.Spawner.environment sets). When set, this "
        "server runs no models: its lmsp/v1 routes forward its Jupyter user's requests (the "
        "lab extension's, and any client's with the server's token) there with "
        "hub_service_token. Ignored with hub_service. See docs/jupyterhub.md.",
    ).tag(config=True)

    hub_service_token = Unicode(
        help="The token sent to hub_service_url (default: $JUPYTERHUB_API_TOKEN, this "
        "server's own hub token, which JupyterHub sets in every user's server).",
    ).tag(config=True)

    owner_max_requests = Int(
        0,
        help="Direct requests (streamed or not) one owner (a hub user, a configured token) may "
        "run at once; one more → 429 rate_limited with Retry-After. 0: no limit.",
    ).tag(config=True)

    owner_max_tasks = Int(
        0,
        help="Tasks (and background responses) one owner may have queued or running; one more "
        "→ 429 rate_limited with Retry-After. 0: no limit.",
    ).tag(config=True)

    embedding_models = Dict(
        key_trait=Unicode(),
        value_trait=Enum(["mean", "cls", "last"]),
        default_value={},
        help="Generative models that also serve embeddings, with how their tokens' states are "
        "pooled into one vector: {'gemma3:270m-q4_k_m': 'mean'}. Embedding GGUFs (BERT-family, "
        "Nomic, EmbeddingGemma) embed with their own pooling without being named here.",
    ).tag(config=True)

    chat_templates = Dict(
        key_trait=Unicode(),
        value_trait=Unicode(),
        default_value={},
        help="Chat templates by model id, in place of what the model's files say: a Jinja "
        "template (as a GGUF's tokenizer.chat_template) makes it a chat model whose prompts "
        "are rendered through it; an empty string makes it a base model, whose prompt is the "
        "text as written (a conversation: a plain transcript; docs/base-models.md). A model "
        "is a chat model when its GGUF or Ollama manifest has a chat template, else a base "
        "model: {'my-base-model': '', 'my-chat-model': '{% for m in messages %}...'}.",
    ).tag(config=True)

    ollama_address = Unicode(
        "",
        help="Also serve Ollama's API (listing and generation only) on this host:port, for "
        "tools that take only a host and send no key (say 127.0.0.1:11434). Off when empty. "
        "On a loopback address it needs no token and refuses other Host names and foreign "
        "Origins; on any other address it needs the Jupyter token. See docs/other-tools.md.",
    ).tag(config=True)

    @default("hub_service_url")
    def _default_hub_service_url(self) -> str:
        return os.environ.get(HUB_URL_VARIABLE, "")

    @default("hub_service_token")
    def _default_hub_service_token(self) -> str:
        return os.environ.get(HUB_TOKEN_VARIABLE, "")

    @property
    def forwards(self) -> bool:
        """Whether this server forwards LMSP to a hub's service instead of serving it."""
        return bool(self.hub_service_url) and not self.hub_service

    @default("ollama_dir")
    def _default_ollama_dir(self) -> str:
        return str(default_ollama_dir())

    @default("huggingface_cache_dir")
    def _default_huggingface_cache_dir(self) -> str:
        return str(default_huggingface_cache_dir())

    def initialize_settings(self) -> None:
        """Build the catalog, engine and services and share them with the handlers, and tell
        the kernels the server will start which model to ask by default."""
        self._share_log()
        export_default_model(self.default_model, os.environ)
        if self.forwards:
            self._forward_to_hub()
            return
        catalog = ModelCatalog(
            model_dirs=[Path(d).expanduser() for d in self.model_dirs],
            ollama_dir=Path(self.ollama_dir).expanduser() if self.ollama_dir else None,
            huggingface_cache_dir=(
                Path(self.huggingface_cache_dir).expanduser()
                if self.huggingface_cache_dir
                else None
            ),
            chat_templates=self.chat_templates,
        )
        build: Callable[..., GenerationBackend] = self.engine_class  # a class, not the Protocol
        local = build(parent=self, log=self.log)
        self.engine = EngineRouter(local, catalog, parent=self, log=self.log)
        for notice in catalog.notices():
            self.log.warning("%s", notice)
        # Embedding models run on llama.cpp too, with the local engine's threads.
        threads = (local.settings if isinstance(local, LocalEngine) else EngineSettings()).threads
        embedders = Embedders(LlamaEmbedder, threads, self.embedding_models)
        self.model_manager = self.model_manager_class(
            self.engine, embedders=embedders, parent=self, log=self.log
        )
        self.task_store = TaskStore(parent=self, log=self.log)
        store = self.task_store.store
        models = ModelDirectory(
            self.engine,
            self.engine,
            self.model_manager,
            conversations=True,
            embedding_pooling=self.embedding_models,
        )
        self.embeddings = EmbeddingService(models, embedders)
        usage = UsageRecords(store)
        self.mcp = McpServers(hub=self.hub_service, parent=self, log=self.log)
        responses = ResponseService(
            models,
            self.engine,
            ResponseRecords(store),
            max_queued=self.max_queued_tasks,
            usage=usage,
            mcp=self.mcp,
        )
        limits = OwnerLimits(self.owner_max_requests, self.owner_max_tasks)
        self.task_service = self.task_store.start(responses, limits)
        self.idempotency = self.task_store.idempotency
        self.settings.update(
            lmsp_models=models,
            lmsp_embeddings=self.embeddings,
            lmsp_anthropic=AnthropicModels(models, self.default_model, parent=self, log=self.log),
            lmsp_responses=responses,
            lmsp_mcp=self.mcp,
            lmsp_tasks=self.task_service,
            lmsp_idempotency=self.idempotency,
            lmsp_tokens=ScopedTokens(self.tokens),
            lmsp_usage=usage,
            lmsp_limits=limits,
            lmsp_hub=self._hub_access(),
            lmsp_max_body_bytes=self.max_body_bytes,
            lmsp_keepalive_seconds=self.sse_keepalive_seconds,
            lmsp_slow_client_seconds=self.slow_client_seconds,
            lmsp_openapi_json=openapi_json,
        )
        self.engine.start()

    def _forward_to_hub(self) -> None:
        """Share only what forwarding needs: no engine, no store (docs/jupyterhub.md)."""
        if not self.hub_service_token:
            self.log.warning(
                "LmspApp.hub_service_token is empty ($JUPYTERHUB_API_TOKEN unset): the hub's "
                "LMSP service will refuse the requests forwarded to it"
            )
        self.log.info("LMSP: forwarding to the hub's service at %s", self.hub_service_url)
        self._forward = HubForward(self.hub_service_url, self.hub_service_token)
        self.settings.update(
            lmsp_forward=self._forward,
            lmsp_tokens=ScopedTokens(self.tokens),
            lmsp_hub=None,
            lmsp_max_body_bytes=self.max_body_bytes,
        )

    def _hub_access(self) -> Any:
        """The hub's auth in hub mode (its OAuth cookie signed with the server's secret)."""
        if not self.hub_service:
            return None
        access = hub_access(parent=self, cache_max_age=60)
        self.settings["hub_auth"] = access.auth  # what the OAuth callback handler reads
        return access

    def _share_log(self) -> None:
        """The package's own loggers (model assembly, the engine) write to the server's log."""
        package = logging.getLogger("lmsp_jupyter")
        if package.level == logging.NOTSET:
            package.setLevel(logging.INFO)
        for handler in self.log.handlers:
            if handler not in package.handlers:
                package.addHandler(handler)

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Once the server listens, tell the kernels it will start where LMSP is, and ask the
        remote servers for their models."""
        export_location(serverapp, os.environ)
        if self.forwards:
            return
        if self.ollama_address:
            self._start_ollama_listener(serverapp)
        if self.engine.remotes:
            await self.engine.refresh()

    def _start_ollama_listener(self, serverapp: Any) -> None:
        """Listen on ``ollama_address``; a taken port or an open address is logged as an
        error and leaves the listener off (the Jupyter port serves on)."""
        try:
            listener = OllamaListener(
                self.ollama_address, token=serverapp.identity_provider.token, log=self.log
            )
        except ListenerError as exc:
            self.log.error("%s", exc)
            return
        listener.start(serverapp.web_app.settings)
        self._ollama_listener = listener

    def initialize_handlers(self) -> None:
        """Mount the LMSP routes, and Ollama's and Anthropic's APIs before LMSP's catch-all of
        ``/lmsp/``."""
        if self.forwards:
            self.handlers.extend(forward_handlers())
            return
        handlers: list[tuple[str, Any]] = [*ollama_handlers, *anthropic_handlers, *usage_handlers]
        if self.hub_service:
            from jupyterhub.services.auth import HubOAuthCallbackHandler

            handlers.append((r"/oauth_callback", HubOAuthCallbackHandler))
        self.handlers.extend([*handlers, *default_handlers])

    async def stop_extension(self) -> None:
        """Stop the Ollama listener, the tasks, the purge and the model workers."""
        if self._ollama_listener is not None:
            self._ollama_listener.stop()
        if self._forward is not None:
            await self._forward.aclose()
        if hasattr(self, "task_store"):
            await self.task_store.close()
            await self.mcp.close()
            await self.model_manager.close()
            self.embeddings.close()
            await self.engine.aclose()


def export_location(serverapp: Any, environ: MutableMapping[str, str]) -> None:
    """Set ``LMSP_URL`` and ``LMSP_TOKEN`` to this server's LMSP root on loopback, and its token.

    Kernels inherit the server's environment, so the client finds the service with no setup.
    Jupyter's identity provider accepts its token as ``Authorization: Bearer``. A server on a
    UNIX socket exports no URL: no loopback URL reaches it. ``LMSP_ROOT_DIR``, the server's
    root, lets a kernel name its notebook as the contents API does (task metadata).
    """
    environ[ROOT_VARIABLE] = str(serverapp.root_dir)
    if serverapp.sock:
        return
    ip = serverapp.ip
    if ip in ("", "0.0.0.0"):
        ip = "127.0.0.1"
    elif ip == "::":
        ip = "::1"
    host = f"[{ip}]" if ":" in ip else ip
    scheme = "https" if serverapp.certfile else "http"
    environ[URL_VARIABLE] = f"{scheme}://{host}:{serverapp.port}{serverapp.base_url}lmsp/v1"
    token = serverapp.identity_provider.token
    if token:
        environ[TOKEN_VARIABLE] = token
    else:
        environ.pop(TOKEN_VARIABLE, None)


def export_default_model(model: str, environ: MutableMapping[str, str]) -> None:
    """Set ``LMSP_MODEL`` to the server's default model (``""``: unset, the magic picks one)."""
    if model:
        environ[MODEL_VARIABLE] = model
    else:
        environ.pop(MODEL_VARIABLE, None)


def main(argv: list[str] | None = None, **kwargs: Any) -> None:
    """``jupyter lmsp``: run the LMSP service on its own Jupyter server (``--hub-service``: as
    a JupyterHub service, where the hub's environment says)."""
    import sys

    argv = hub_service_argv(sys.argv[1:] if argv is None else argv)
    LmspApp.launch_instance(argv, open_browser=False, **kwargs)  # type: ignore[no-untyped-call]
