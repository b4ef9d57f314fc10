"""A Jupyter server's first requests for a remote server's model, while it is still being asked
for its models: the requests share that question and get their answers, and the listing waits for
it. The scripted server of test_remote_scripted.py holds its listing until the test releases it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import running_server
from tests.server.test_remote_scripted import MODEL, Handler, ScriptedServer, serving

#: Released by the test: until then the scripted server does not answer its listing.
RELEASED = threading.Event()


class HeldListing(Handler):
    def do_GET(self) -> None:
        if self.path == "/v1/models":
            RELEASED.wait(120)
        super().do_GET()


@pytest.fixture
def scripted() -> Iterator[ScriptedServer]:
    RELEASED.clear()
    with serving(HeldListing) as server:
        yield server
        RELEASED.set()  # before the server stops: a held listing must not keep it


def test_first_requests_during_the_start_up_listing_all_get_their_answer_and_the_listing_waits(
    scripted: ScriptedServer, tmp_path: Path
) -> None:
    remote = {"name": "scripted", "url": f"http://127.0.0.1:{scripted.server_address[1]}/v1"}
    config = {"EngineRouter": {"remote_servers": [remote], "first_listing_seconds": 120}}
    body = {"model": MODEL, "input": "Why is the sky blue?", "max_output_tokens": 8}
    # The server answers, its start-up listing of the remote is held: the first requests come
    # while it is under way.
    with (
        running_server(tmp_path, config=config) as server,
        server.client() as client,
        ThreadPoolExecutor(4) as pool,
    ):
        answers = [pool.submit(client.post, "/responses", json=body) for _ in range(3)]
        listing = pool.submit(client.get, "/models")
        time.sleep(1)  # they reach the server before the listing ends
        RELEASED.set()
        statuses = [answer.result().status_code for answer in answers]
        models = {model["id"]: model for model in listing.result().json()["data"]}
    assert statuses == [200, 200, 200]
    assert models[MODEL]["status"] == "available"
    assert [path for method, path, _ in scripted.requests if method == "GET"] == ["/v1/models"]
