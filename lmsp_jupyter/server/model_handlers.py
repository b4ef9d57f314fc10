"""The ``/lmsp/v1/models`` routes: list the models, read one, load and unload one; and
``/lmsp/v1/mcp/servers``, the MCP servers whose tools the models may call."""

from __future__ import annotations

from ..service.mcp import McpServers
from .base import LmspHandler
from .operations import Operation, json_reply, ref


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


class McpServersHandler(LmspHandler):
    """``GET /lmsp/v1/mcp/servers``: the MCP servers of ``mcp.json``, their state and tools."""

    operations = {
        "get": Operation(
            "listMcpServers",
            "List the MCP servers whose tools a response's mcp tool may offer",
            "models",
            {"200": json_reply(ref("McpServerList"), "The servers, in the order of mcp.json.")},
            scope="models:read",
        )
    }

    def get(self) -> None:
        servers: McpServers = self.settings["lmsp_mcp"]
        self.write_model(servers.listing())
