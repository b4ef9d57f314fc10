"""A client that stops reading is dropped, holds no unbounded memory, slows no one, resumes."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from traitlets.config import Config

from tests.conftest import MODEL
from tests.server.helpers import parse_sse, server_config

#: 60 deltas of 256 KiB (64 Ki four-byte characters, under the 4 Mi characters an output
#: text may have): far more than the socket buffers of a client that does not read can hold.
BIG = "\N{GRINNING FACE}" * 65536
COUNT = 60
#: The test server's ``slow_client_seconds``.
SLOW_S = 3


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest) -> Config:
    return server_config(request, slow_client_seconds=SLOW_S)


@pytest.mark.script({"deltas": [BIG] * COUNT, "delay": 0.01})
async def test_a_follower_that_stops_reading_is_dropped_and_resumes_from_its_last_id(
    lmsp: httpx.AsyncClient, jp_http_port: int, jp_base_url: str
) -> None:
    body = {"type": "response", "request": {"model": MODEL, "input": "x"}}
    task = (await lmsp.post("/tasks", json=body)).json()
    path = f"{jp_base_url}lmsp/v1/tasks/{task['id']}/events"
    token = lmsp.headers["Authorization"]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # no autotuning either
    sock.connect(("127.0.0.1", jp_http_port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=2**16)
    host = f"127.0.0.1:{jp_http_port}"
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {token}\r\n\r\n".encode())
    await writer.drain()
    # Meanwhile a reading follower gets every event, undisturbed by the stalled one.
    async with lmsp.stream("GET", f"/tasks/{task['id']}/events") as response:
        events, _ = parse_sse([line async for line in response.aiter_lines()])
    assert events[-1].event == "response.completed"
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    # The stalled follower is dropped once one write has waited SLOW_S for it: on a quiet
    # machine the reader above is done sooner, so let that time pass before reading at all.
    await asyncio.sleep(SLOW_S + 2)
    # The stalled follower was dropped: what it can still read ends, well short of everything.
    received = b""
    while chunk := await asyncio.wait_for(reader.read(2**20), 60):
        received += chunk
    writer.close()
    head, _, stream = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert len(stream) < COUNT * len(BIG.encode())
    ids = [int(line[4:]) for line in stream.split(b"\n") if line.startswith(b"id: ")]
    assert ids and ids[-1] < len(events)
    resumed = await lmsp.get(f"/tasks/{task['id']}/events", headers={"Last-Event-ID": str(ids[-1])})
    rest, _ = parse_sse(resumed.text.splitlines())
    assert [e.id for e in rest] == list(range(ids[-1] + 1, len(events) + 1))
    assert rest[-1].event == "response.completed"
