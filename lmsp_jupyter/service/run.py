"""A response being generated: the request, its model and prompt, and what it has made so far."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ..engine.catalog import ModelEntry
from ..engine.generation import Prompt
from ..protocol.errors import LmspError
from ..protocol.ids import new_id
from ..protocol.items import InputItem, OutputItem
from ..protocol.prediction import Speculation
from ..protocol.requests import FunctionTool, JsonSchemaFormat, McpTool, ResponseRequest
from ..protocol.responses import IncompleteDetails, Response, ResponseStatus, Usage
from .decoding import DecodingPlan
from .mcp.offer import McpOffer
from .queue import Ticket

#: The owner of requests made with the Jupyter server's own credentials.
OWNER = "jupyter"


@dataclass
class ResponseRun:
    """One response being generated: its events as they happen and the object they build."""

    request: ResponseRequest
    entry: ModelEntry
    prompt: Prompt
    owner: str
    context: list[InputItem]
    plan: DecodingPlan
    keep_alive: float | None = None
    #: Its prediction, and whether it may speculate at all.
    speculation: Speculation = field(default_factory=Speculation)
    id: str = field(default_factory=lambda: new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))
    status: ResponseStatus = "in_progress"
    output: list[OutputItem] = field(default_factory=list)
    usage: Usage | None = None
    incomplete_details: IncompleteDetails | None = None
    error: LmspError | None = None
    #: Its place in the model's line, once it has joined it.
    ticket: Ticket | None = None
    #: Whether it goes before the others waiting for its model (:meth:`.ModelQueue.join`).
    priority: bool = False
    #: Its MCP tools (11.6), if it has any.
    mcp: McpOffer | None = None

    def response(self) -> Response:
        """The response object as it stands, with the settings of its request (11.4)."""
        request = self.request
        return Response(
            id=self.id,
            created_at=self.created_at,
            status=self.status,
            model=request.model,
            output=list(self.output),
            usage=self.usage,
            error=self.error.to_problem() if self.error else None,
            incomplete_details=self.incomplete_details,
            instructions=request.instructions,
            metadata=request.metadata or {},
            tools=[_tool(tool) for tool in request.tools or []],
            tool_choice=_dump(request.tool_choice or "auto"),
            temperature=request.temperature,
            top_p=request.top_p,
            max_output_tokens=request.max_output_tokens,
            previous_response_id=request.previous_response_id,
            store=request.store,
            background=request.background,
            parallel_tool_calls=request.parallel_tool_calls is not False,
            text={"format": _text_format(request)},
        )


def _tool(tool: FunctionTool | McpTool) -> dict[str, Any]:
    """A tool as the response shows it: an MCP tool's ``headers`` (credentials) left out."""
    return tool.model_dump(
        exclude_none=True, exclude={"headers"} if isinstance(tool, McpTool) else None
    )


def _dump(value: str | BaseModel) -> str | dict[str, Any]:
    return value if isinstance(value, str) else value.model_dump(exclude_none=True)


def _text_format(request: ResponseRequest) -> dict[str, Any]:
    """The output format of ``request`` in the shape of the request's ``text.format``."""
    if request.text is not None and request.text.format is not None:
        return request.text.format.model_dump(by_alias=True, exclude_none=True)
    response_format = request.response_format
    if not isinstance(response_format, JsonSchemaFormat):
        return {"type": "text"}
    spec = response_format.json_schema
    return {"type": "json_schema", **spec.model_dump(by_alias=True, exclude_none=True)}
