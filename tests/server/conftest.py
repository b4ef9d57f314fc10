"""The in-process server of the server suite's tests that run ``jp_serverapp``: the extension,
none of the machine's model stores, a scripted engine where a test is marked ``script``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from traitlets.config import Config

from tests.server.helpers import server_config


@pytest.fixture
def jp_home_dir(request: pytest.FixtureRequest, jp_home_dir: Path) -> Path:
    """pytest-jupyter's temporary HOME. A server on the real engine (a test not marked
    ``script``) finds the bundled model assembled under the real HOME, before HOME changes."""
    if request.node.get_closest_marker("script") is None:
        request.getfixturevalue("bundled_model_path")
    return jp_home_dir


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest) -> Config:
    """pytest-jupyter's server config: :func:`server_config` with quick keep-alives."""
    return server_config(request, sse_keepalive_seconds=0.05)


@pytest.fixture
def lmsp(
    jp_serverapp: Any,
    http_server: Any,
    jp_http_port: int,
    jp_base_url: str,
    jp_auth_header: dict[str, str],
    jp_asyncio_loop: asyncio.AbstractEventLoop,
) -> Iterator[httpx.AsyncClient]:
    """An HTTP client of the in-process server's LMSP endpoints, on the server's loop."""
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url}lmsp/v1"
    client = httpx.AsyncClient(base_url=base, headers=jp_auth_header, timeout=120)
    yield client
    jp_asyncio_loop.run_until_complete(client.aclose())
