"""Load, bounded: 200 connections at once against one live server (``benchmarks/load.py``
measures the same mix with its figures). Nothing here is timed: every reply must be a 200,
never a 5xx, and every stream must end with its final event."""

from __future__ import annotations

import asyncio

from benchmarks.load import ROTATION, run_load
from tests.conftest import LiveServer

CONNECTIONS = 200


def test_200_connections_at_once_all_answered_and_every_stream_ends(
    live_server: LiveServer,
) -> None:
    headers = {"Authorization": f"Bearer {live_server.token}"}
    result = asyncio.run(run_load(live_server.lmsp, headers, CONNECTIONS, tokens=2, tasks=4))
    assert len(result.connections) == CONNECTIONS
    assert {kind: len(result.of(kind)) for kind in set(ROTATION)} == {
        "stream": 80,
        "follower": 80,
        "models": 40,
    }
    assert [(c.kind, c.status, c.error) for c in result.connections if c.status != 200] == []
    assert result.server_errors == [] and result.unended == []
    assert all(c.first_s is not None for c in result.connections)  # each got its first event
