"""The MCP tools of one response (11.6): the servers' tools listed and offered to the model as
functions, its calls of them run (or held for approval), their items and events.

The engine never sees MCP: it is offered functions, and the calls it makes of the ones that
stand for MCP tools become ``mcp_call`` or ``mcp_approval_request`` items here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...engine.generation import GrammarError
from ...engine.guidance import check_schema
from ...protocol.errors import LmspError
from ...protocol.events import (
    EventData,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    McpCallArgumentsDelta,
    McpCallArgumentsDone,
    McpCallCompleted,
    McpCallFailed,
    McpCallInProgress,
    McpListToolsCompleted,
    McpListToolsFailed,
    McpListToolsInProgress,
    OutputItemAdded,
    OutputItemDone,
)
from ...protocol.ids import new_id
from ...protocol.items import (
    InputItem,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListTools,
    McpToolInfo,
    OutputFunctionCall,
    OutputItem,
    OutputMcpApprovalRequest,
    OutputMcpCall,
    OutputMcpListTools,
)
from ...protocol.requests import (
    AllowedTool,
    AllowedToolsChoice,
    FunctionTool,
    McpTool,
    McpToolChoice,
    NamedToolChoice,
    ResponseRequest,
    ToolChoice,
)
from .connection import Connection, McpFailure
from .servers import McpServers

#: Model rounds one response may take after running MCP calls; then the model must answer.
MAX_ROUNDS = 8


@dataclass(frozen=True)
class OfferedTool:
    """An MCP tool as the model is offered it: a function of this name."""

    function: str
    tool: McpTool
    connection: Connection
    info: McpToolInfo

    @property
    def label(self) -> str:
        """The server's label, as the request names it."""
        return self.tool.server_label


@dataclass
class McpOffer:
    """The MCP side of one response: what it offers, lists and runs."""

    servers: McpServers
    #: Offered function name → the MCP tool it stands for.
    offered: dict[str, OfferedTool]
    #: ``mcp_list_tools`` items this response adds (servers not listed yet in the conversation).
    listed: list[OutputMcpListTools]
    #: Approved requests to run before the model's first round.
    approved: list[McpApprovalRequest]
    #: The request with its MCP tools as functions, for the model's first round.
    expanded: ResponseRequest
    #: The request as it is after a round of MCP calls.
    after_calls: ResponseRequest
    rounds: int = 0

    @classmethod
    async def prepare(
        cls, servers: McpServers, request: ResponseRequest, context: Sequence[InputItem]
    ) -> McpOffer:
        """List the servers of ``request``'s MCP tools (once per conversation), and find the
        approvals its input answers; an unknown label or a refused URL → ``invalid_request``."""
        targets = _targets(servers, request)
        known = {
            item.server_label: item.tools
            for item in context
            if isinstance(item, McpListTools) and item.error is None
        }
        offered: dict[str, OfferedTool] = {}
        listed: list[OutputMcpListTools] = []
        taken = {tool.name for tool in request.function_tools()}
        for tool, connection in targets:
            tools = known.get(tool.server_label)
            if tools is None:
                item = await _listing(tool, connection)
                listed.append(item)
                tools = item.tools
            for info in tools:
                if not tool.allows(info.name) or not _enforceable(info.input_schema):
                    continue
                function = (
                    info.name if info.name not in taken else f"{tool.server_label}.{info.name}"
                )
                taken.add(function)
                offered[function] = OfferedTool(function, tool, connection, info)
        approved = _approved(request, context, servers)
        functions = [*request.function_tools(), *(_function(o) for o in offered.values())]
        first = _choice(request.tool_choice, offered)
        after = "none" if _forces(request.tool_choice) else request.tool_choice
        after_calls = request.model_copy(
            update={"tools": functions, "tool_choice": _choice(after, offered)}
        )
        expanded = (
            after_calls
            if approved
            else request.model_copy(update={"tools": functions, "tool_choice": first})
        )
        return cls(servers, offered, listed, approved, expanded, after_calls)

    def needs_approval(self, function: str) -> bool:
        """Whether a call of ``function`` waits for the user (the request's
        ``require_approval``, less the server's ``autoApprove``)."""
        offered = self.offered[function]
        if offered.info.name in offered.connection.config.auto_approve:
            return False
        return offered.tool.needs_approval(offered.info.name)

    async def run(
        self, offered: OfferedTool, arguments: str, item_id: str, approval: str | None = None
    ) -> OutputMcpCall:
        """Run one call; whatever happens, an ``mcp_call`` item (``output`` or ``error``)."""
        call = OutputMcpCall(
            id=item_id,
            server_label=offered.label,
            name=offered.info.name,
            arguments=arguments,
            approval_request_id=approval,
        )
        try:
            parsed = json.loads(arguments or "{}")
            if not isinstance(parsed, dict):
                raise McpFailure("the arguments are not a JSON object")
            limit = self.servers.call_timeout_seconds
            output = await offered.connection.call(offered.info.name, parsed, limit)
        except json.JSONDecodeError as exc:
            return call.model_copy(update={"error": f"the arguments are not JSON: {exc}"})
        except McpFailure as exc:
            return call.model_copy(update={"error": str(exc)})
        except Exception as exc:  # a server's garbage must not end the response
            self.servers.log.exception("MCP call of %r failed", offered.info.name)
            return call.model_copy(update={"error": f"{type(exc).__name__}: {exc}"})
        return call.model_copy(update={"output": output})

    def function_of(self, label: str, name: str) -> OfferedTool | None:
        """The offered tool ``name`` of the server ``label``."""
        for offered in self.offered.values():
            if offered.label == label and offered.info.name == name:
                return offered
        return None


def _targets(servers: McpServers, request: ResponseRequest) -> list[tuple[McpTool, Connection]]:
    targets: list[tuple[McpTool, Connection]] = []
    for index, tool in enumerate(request.tools or ()):
        if not isinstance(tool, McpTool):
            continue
        if tool.server_url is not None:
            param = f"tools[{index}].server_url"
            connection = servers.remote(
                tool.server_label, tool.server_url, tool.headers or {}, param
            )
        else:
            connection = servers.connection(tool.server_label, f"tools[{index}].server_label")
            if connection.config.disabled:
                raise LmspError(
                    "invalid_request",
                    f"the MCP server {tool.server_label!r} is disabled in mcp.json",
                    param=f"tools[{index}].server_label",
                )
        targets.append((tool, connection))
    return targets


async def _listing(tool: McpTool, connection: Connection) -> OutputMcpListTools:
    try:
        tools = await connection.list_tools()
    except McpFailure as exc:
        return OutputMcpListTools(id=new_id("mcpl"), server_label=tool.server_label, error=str(exc))
    return OutputMcpListTools(id=new_id("mcpl"), server_label=tool.server_label, tools=tools)


def _enforceable(schema: dict[str, Any]) -> bool:
    try:
        check_schema(schema)
    except GrammarError:
        return False
    return True


def _function(offered: OfferedTool) -> FunctionTool:
    """The function the model is offered for an MCP tool (its name need not be a function
    name a client could send, so it is not validated as one)."""
    schema = {key: value for key, value in offered.info.input_schema.items() if key != "$schema"}
    return FunctionTool.model_construct(
        type="function",
        name=offered.function,
        description=offered.info.description,
        parameters=schema or {"type": "object", "properties": {}},
        strict=None,
    )


def _forces(choice: ToolChoice | None) -> bool:
    return choice == "required" or isinstance(choice, NamedToolChoice | McpToolChoice)


def _choice(choice: ToolChoice | None, offered: dict[str, OfferedTool]) -> ToolChoice | None:
    """An ``mcp`` tool choice as the function choice that does it."""
    if not isinstance(choice, McpToolChoice):
        return choice
    names = [
        o.function
        for o in offered.values()
        if o.label == choice.server_label and choice.name in (None, o.info.name)
    ]
    if not names:
        what = f"a tool {choice.name!r}" if choice.name else "tools"
        raise LmspError(
            "invalid_request",
            f"the MCP server {choice.server_label!r} offers no {what} the model may call",
            param="tool_choice.name" if choice.name else "tool_choice.server_label",
        )
    if len(names) == 1:
        return NamedToolChoice(type="function", name=names[0])
    return AllowedToolsChoice(
        type="allowed_tools",
        mode="required",
        tools=[AllowedTool(type="function", name=name) for name in names],
    )


def _approved(
    request: ResponseRequest, context: Sequence[InputItem], servers: McpServers
) -> list[McpApprovalRequest]:
    """The approval requests the input approves that have not run yet."""
    asked = {item.id: item for item in context if isinstance(item, McpApprovalRequest)}
    ran = {item.approval_request_id for item in context if isinstance(item, McpCall)}
    labels = {tool.server_label for tool in request.mcp_tools()}
    approved: list[McpApprovalRequest] = []
    for index, item in enumerate(request.input):
        if not isinstance(item, McpApprovalResponse):
            continue
        param = f"input[{index}].approval_request_id"
        asked_for = asked.get(item.approval_request_id)
        if asked_for is None:
            raise LmspError(
                "invalid_request",
                f"no mcp_approval_request {item.approval_request_id!r} in the conversation",
                param=param,
            )
        if asked_for.server_label not in labels:
            raise LmspError(
                "invalid_request",
                f"the MCP server {asked_for.server_label!r} of {item.approval_request_id!r} "
                "is not in tools",
                param=param,
            )
        if item.approve and asked_for.id not in ran and servers.answer(asked_for.id):
            approved.append(asked_for)
    return approved


@dataclass
class McpEvents:
    """A model round's events with the calls of MCP tools made ``mcp_call`` items (run at
    once) or ``mcp_approval_request`` items (held for approval)."""

    offer: McpOffer
    response_id: str
    #: The response's items, as the round's builder fills them.
    items: list[OutputItem]
    #: Output index → (the MCP item's id, whether it waits for approval).
    _open: dict[int, tuple[str, bool]] = field(default_factory=dict)
    #: Calls run in this round.
    ran: int = 0
    #: Calls that wait for approval.
    waiting: int = 0

    async def translate(self, data: EventData) -> AsyncIterator[EventData]:
        """``data``, or what it becomes when it is about a call of an MCP tool."""
        if isinstance(data, OutputItemAdded) and self._is_mcp(data.item):
            assert isinstance(data.item, OutputFunctionCall)
            offered = self.offer.offered[data.item.name]
            held = self.offer.needs_approval(data.item.name)
            item_id = new_id("mcpr" if held else "mcp")
            self._open[data.output_index] = (item_id, held)
            if not held:
                call = OutputMcpCall(
                    id=item_id,
                    server_label=offered.label,
                    name=offered.info.name,
                    arguments="",
                    status="in_progress",
                )
                yield OutputItemAdded(
                    response_id=self.response_id, output_index=data.output_index, item=call
                )
            return
        index: int = getattr(data, "output_index", -1)
        opened = self._open.get(index)
        if opened is None or isinstance(data, OutputItemAdded):
            yield data
            return
        item_id, held = opened
        where = {"response_id": self.response_id, "item_id": item_id, "output_index": index}
        if isinstance(data, FunctionCallArgumentsDelta):
            if not held:
                yield McpCallArgumentsDelta(**where, delta=data.delta)
        elif isinstance(data, FunctionCallArgumentsDone):
            if not held:
                yield McpCallArgumentsDone(**where, arguments=data.arguments)
        elif isinstance(data, OutputItemDone) and isinstance(data.item, OutputFunctionCall):
            del self._open[index]
            async for event in self._close(index, data.item, item_id, held, where):
                yield event
        else:
            yield data

    async def _close(
        self,
        index: int,
        call: OutputFunctionCall,
        item_id: str,
        held: bool,
        where: dict[str, Any],
    ) -> AsyncIterator[EventData]:
        offered = self.offer.offered[call.name]
        if held:
            request = OutputMcpApprovalRequest(
                id=item_id,
                server_label=offered.label,
                name=offered.info.name,
                arguments=call.arguments,
            )
            self.items[index] = request
            self.waiting += 1
            yield OutputItemAdded(response_id=self.response_id, output_index=index, item=request)
            yield OutputItemDone(response_id=self.response_id, output_index=index, item=request)
            return
        yield McpCallInProgress(**where)
        if call.status == "incomplete":  # the generation was cut short: nothing runs
            done = OutputMcpCall(
                id=item_id,
                server_label=offered.label,
                name=offered.info.name,
                arguments=call.arguments,
                error="the model's call was cut short; it did not run",
                status="incomplete",
            )
        else:
            done = await self.offer.run(offered, call.arguments, item_id)
            self.ran += 1
        self.items[index] = done
        yield McpCallFailed(**where) if done.error is not None else McpCallCompleted(**where)
        yield OutputItemDone(response_id=self.response_id, output_index=index, item=done)

    def _is_mcp(self, item: OutputItem) -> bool:
        return isinstance(item, OutputFunctionCall) and item.name in self.offer.offered


async def opening_events(
    offer: McpOffer, response_id: str, items: list[OutputItem]
) -> AsyncIterator[EventData]:
    """The events of what a response does before the model's first round: the listings it
    adds, then the approved calls it runs (each appended to ``items``)."""
    for listing in offer.listed:
        index = len(items)
        items.append(listing)
        where = {"response_id": response_id, "item_id": listing.id, "output_index": index}
        listing_opened = listing.model_copy(update={"status": "in_progress", "tools": []})
        yield OutputItemAdded(response_id=response_id, output_index=index, item=listing_opened)
        yield McpListToolsInProgress(**where)
        yield McpListToolsFailed(**where) if listing.error else McpListToolsCompleted(**where)
        yield OutputItemDone(response_id=response_id, output_index=index, item=listing)
    for request in offer.approved:
        offered = offer.function_of(request.server_label, request.name)
        index = len(items)
        item_id = new_id("mcp")
        where = {"response_id": response_id, "item_id": item_id, "output_index": index}
        opened = OutputMcpCall(
            id=item_id,
            server_label=request.server_label,
            name=request.name,
            arguments=request.arguments,
            approval_request_id=request.id,
            status="in_progress",
        )
        items.append(opened)
        yield OutputItemAdded(response_id=response_id, output_index=index, item=opened)
        yield McpCallInProgress(**where)
        if offered is None:
            done = opened.model_copy(
                update={"status": "completed", "error": f"the tool {request.name!r} is not offered"}
            )
        else:
            done = await offer.run(offered, request.arguments, item_id, approval=request.id)
        items[index] = done
        yield McpCallFailed(**where) if done.error is not None else McpCallCompleted(**where)
        yield OutputItemDone(response_id=response_id, output_index=index, item=done)
