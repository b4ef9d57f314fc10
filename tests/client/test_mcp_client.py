"""``mcp=[...]`` and MCP approvals in the client: what it sends, with an in-process transport."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from lmsp_jupyter.client import AsyncLmspClient, LmspClient, approval_request
from lmsp_jupyter.protocol.items import (
    OutputMcpApprovalRequest,
    OutputMcpListTools,
    OutputMessage,
)
from lmsp_jupyter.protocol.responses import Response
from tests.client.test_wire import BASE, EVENTS, Recorder, events_reply, json_reply, stream_of

FILES = {"type": "mcp", "server_label": "files"}
CALC = {"type": "mcp", "server_label": "calc"}
WEATHER = {"type": "function", "name": "weather", "parameters": {"type": "object"}}
TASK = {"id": "task_1", "status": "queued", "created_at": 1, "response_id": "resp_1"}


def asking(*ids: str) -> Response:
    """A stored response that ended asking for approval of ``ids``, offering ``files``."""
    return Response(
        id="resp_1",
        created_at=0,
        status="completed",
        model="m",
        store=True,
        tools=[FILES],
        output=[
            OutputMcpListTools(id="mcpl_1", server_label="files", tools=[]),
            *(
                OutputMcpApprovalRequest(
                    id=i, server_label="files", name="read_file", arguments="{}"
                )
                for i in ids
            ),
        ],
    )


ANSWERED = Response(id="resp_2", created_at=0, status="completed", model="m").model_dump(
    mode="json"
)


def sent(recorder: Recorder) -> list[Any]:
    return [json.loads(request.content) for request in recorder.requests]


def test_each_label_becomes_an_mcp_tool_after_the_request_tools() -> None:
    recorder = Recorder(
        json_reply(200, ANSWERED), events_reply(stream_of(*EVENTS)), json_reply(202, TASK)
    )
    with LmspClient(BASE, "t", transport=recorder.transport()) as client:
        client.create_response({"model": "m", "input": "x", "tools": [WEATHER]}, mcp=["files"])
        list(client.stream_response({"model": "m", "input": "x"}, mcp=["files", "calc", "files"]))
        client.create_task({"model": "m", "input": "x"}, mcp=["calc"])
    first, streamed, task = sent(recorder)
    assert first["tools"] == [WEATHER, FILES]
    assert (streamed["tools"], streamed["stream"]) == ([FILES, CALC], True)
    assert task["request"]["tools"] == [CALC]


def test_one_label_alone_is_refused_before_anything_is_sent() -> None:
    recorder = Recorder()
    with (
        LmspClient(BASE, "t", transport=recorder.transport()) as client,
        pytest.raises(TypeError, match="a list of server labels"),
    ):
        client.create_response({"model": "m", "input": "x"}, mcp="files")
    assert recorder.requests == []


def test_answer_approvals_continues_the_response_with_each_decision() -> None:
    recorder = Recorder(json_reply(200, ANSWERED), json_reply(200, ANSWERED))
    with LmspClient(BASE, "t", transport=recorder.transport()) as client:
        assert client.answer_approvals(asking("mcpr_1", "mcpr_2")).id == "resp_2"
        client.answer_approvals(
            asking("mcpr_1", "mcpr_2"), {"mcpr_1": True, "mcpr_2": False}, reason="not that"
        )
    every, each = sent(recorder)
    assert every == {
        "model": "m",
        "previous_response_id": "resp_1",
        "store": True,
        "tools": [FILES],
        "stream": False,
        "input": [
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_2", "approve": True},
        ],
    }
    assert each["input"][1] == {
        "type": "mcp_approval_response",
        "approval_request_id": "mcpr_2",
        "approve": False,
        "reason": "not that",
    }


def test_the_async_client_answers_the_same() -> None:
    recorder = Recorder(json_reply(200, ANSWERED), json_reply(202, TASK))

    async def run() -> None:
        async with AsyncLmspClient(BASE, "t", transport=recorder.transport()) as client:
            await client.answer_approvals(asking("mcpr_1"), False)
            await client.create_task(approval_request(asking("mcpr_1")), mcp=["calc"])

    asyncio.run(run())
    denied, task = sent(recorder)
    assert denied["input"] == [
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False}
    ]
    assert task["request"]["tools"] == [FILES, CALC]
    assert task["request"]["previous_response_id"] == "resp_1"


@pytest.mark.parametrize(
    ("response", "approve", "message"),
    [
        (
            Response(
                id="resp_9",
                created_at=0,
                status="completed",
                model="m",
                output=[OutputMessage(id="msg_1")],
            ),
            True,
            "resp_9 ends with no mcp_approval_request",
        ),
        (asking("mcpr_1", "mcpr_2"), {"mcpr_1": True}, "decide each of mcpr_1, mcpr_2, not mcpr_1"),
    ],
)
def test_approvals_that_do_not_fit_are_refused(
    response: Response, approve: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        approval_request(response, approve)
