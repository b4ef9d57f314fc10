"""The ``/lmsp/v1`` endpoints: parse, call the service, write."""

from __future__ import annotations

from urllib.parse import unquote

from .. import __version__
from ..engine.generation import CancelToken
from ..protocol.errors import LmspError
from ..protocol.models import AuthInfo, ModelList, Scope, ServiceDocument, ServiceInfo
from ..protocol.requests import parse_response_request
from .base import LmspHandler
from .sse import EventStream

SCOPES: list[Scope] = [
    "models:read",
    "responses:read",
    "responses:write",
    "tasks:read",
    "tasks:write",
]


class ServiceHandler(LmspHandler):
    """``GET /lmsp/v1``: the service document."""

    def get(self) -> None:
        document = ServiceDocument(
            service=ServiceInfo(name="lmsp-jupyter", version=__version__),
            capabilities=["streaming"],
            auth=AuthInfo(scopes=SCOPES),
        )
        self.write_model(document)


class ModelsHandler(LmspHandler):
    """``GET /lmsp/v1/models``: every model found on this machine."""

    def get(self) -> None:
        self.write_model(ModelList(data=self.models.list()))


class ModelHandler(LmspHandler):
    """``GET /lmsp/v1/models/{model_id}``: one model."""

    def get(self, model_id: str) -> None:
        self.write_model(self.models.get(unquote(model_id)))


class ResponsesHandler(LmspHandler):
    """``POST /lmsp/v1/responses``: answer now, or stream the answer as SSE."""

    _stream: EventStream | None = None

    async def post(self) -> None:
        request = parse_response_request(self.json_body())
        run = await self.service.start(request)
        if not request.stream:
            self.write_model(await self.service.complete(run))
            return
        self._stream = EventStream(self, self.settings["lmsp_keepalive_seconds"])
        await self._stream.send(self.service.events(run, CancelToken()))
        self.finish()

    def on_connection_close(self) -> None:
        if self._stream is not None:
            self._stream.close()


class NotFoundHandler(LmspHandler):
    """Any other path under ``/lmsp/``."""

    def get(self, path: str | None = None) -> None:
        raise LmspError("not_found", f"no LMSP endpoint at {self.request.path}")

    head = post = put = patch = delete = get


#: The LMSP routes; the extension app puts the server's base_url before each.
default_handlers: list[tuple[str, type[LmspHandler]]] = [
    (r"/lmsp/v1/?", ServiceHandler),
    (r"/lmsp/v1/models/?", ModelsHandler),
    (r"/lmsp/v1/models/(.+)", ModelHandler),
    (r"/lmsp/v1/responses/?", ResponsesHandler),
    (r"/lmsp(/.*)?", NotFoundHandler),
]
