"""What an ask records about where it came from: the metadata of its tasks."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_jupyter.kernel.answer import Answer
from lmsp_jupyter.kernel.origin import ask_origin, notebook_path, source_hash
from tests.kernel.fakes import ScriptedClient, Turn

#: The same vectors are checked by the lab extension's tests (labextension/test/restore.test.ts).
HASHES = {
    "": "cbf29ce484222325",
    "a": "af63dc4c8601ec8c",
    "foobar": "85944171f73967e8",
    '%lmsp ask Once upon a time\nprint("é→✓")': "7c002b13d252ae49",
}


@pytest.mark.parametrize(("source", "expected"), HASHES.items())
def test_the_source_hash_is_fnv1a_64_of_the_utf8_source(source: str, expected: str) -> None:
    assert source_hash(source) == expected


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (
            {"JPY_SESSION_NAME": "/srv/root/dir/x.ipynb", "LMSP_ROOT_DIR": "/srv/root"},
            "dir/x.ipynb",
        ),
        ({"JPY_SESSION_NAME": "/srv/root/x.ipynb", "LMSP_ROOT_DIR": "/srv/root/"}, "x.ipynb"),
        (
            {"JPY_SESSION_NAME": "/elsewhere/x.ipynb", "LMSP_ROOT_DIR": "/srv/root"},
            "/elsewhere/x.ipynb",
        ),
        ({"JPY_SESSION_NAME": "/srv/root/x.ipynb"}, "/srv/root/x.ipynb"),
        ({"JPY_SESSION_NAME": "dir/x.ipynb", "LMSP_ROOT_DIR": "/srv/root"}, "dir/x.ipynb"),
        ({"LMSP_ROOT_DIR": "/srv/root"}, None),
        ({}, None),
    ],
)
def test_the_notebook_is_named_as_the_contents_api_names_it(
    environ: dict[str, str], expected: str | None
) -> None:
    assert notebook_path(environ) == expected


class Kernel:
    """The part of an ipykernel kernel ``ask_origin`` reads: the shell request being run."""

    def __init__(self, parent: dict[str, Any]) -> None:
        self.parent = parent

    def get_parent(self, channel: str) -> dict[str, Any]:
        assert channel == "shell"
        return self.parent


def execute_request(code: str, **metadata: Any) -> dict[str, Any]:
    return {
        "header": {"msg_type": "execute_request"},
        "metadata": metadata,
        "content": {"code": code},
    }


SESSION = {"JPY_SESSION_NAME": "/srv/root/dir/x.ipynb", "LMSP_ROOT_DIR": "/srv/root"}


def test_a_notebook_cell_records_notebook_cell_source_and_kernel() -> None:
    kernel = Kernel(execute_request("%lmsp ask hi", cellId="c-1", deletedCells=[]))
    assert ask_origin(kernel, "k-1", SESSION) == {
        "notebook": "dir/x.ipynb",
        "cell": "c-1",
        "source_hash": source_hash("%lmsp ask hi"),
        "kernel": "k-1",
    }


def test_a_request_without_a_cell_id_records_no_cell() -> None:
    kernel = Kernel(execute_request("%lmsp ask hi"))  # a console, nbclient, jupyter run
    assert ask_origin(kernel, "k-1", SESSION) == {"notebook": "dir/x.ipynb", "kernel": "k-1"}


def test_a_kernel_jupyter_server_did_not_start_records_its_cell_and_id_only() -> None:
    kernel = Kernel(execute_request("x", cellId="c-1"))
    assert ask_origin(kernel, "k-1", {}) == {
        "cell": "c-1",
        "source_hash": source_hash("x"),
        "kernel": "k-1",
    }


def test_plain_ipython_records_nothing() -> None:
    assert ask_origin(None, None, SESSION) == {}


def test_a_value_the_service_would_refuse_is_left_out() -> None:
    deep = {"JPY_SESSION_NAME": "/srv/root/" + "d/" * 300 + "x.ipynb", "LMSP_ROOT_DIR": "/srv/root"}
    kernel = Kernel(execute_request("x", cellId="c-1"))
    assert set(ask_origin(kernel, "k-1", deep)) == {"cell", "source_hash", "kernel"}


def test_every_round_of_an_ask_carries_its_origin_and_ask_id() -> None:
    client = ScriptedClient([Turn(calls=(("f", "{}"),)), Turn(deltas=("done",))])
    origin = {"notebook": "x.ipynb", "cell": "c-1"}
    answer = Answer(client, {"model": "m", "input": "hi"}, origin=origin).start()
    answer.wait(10)  # the call of a tool nobody has is declined, and the model answers
    assert answer.status == "completed"
    assert [request["metadata"] for request in client.requests] == [
        {"notebook": "x.ipynb", "cell": "c-1", "ask": answer.ask_id}
    ] * 2


def test_an_ask_without_origin_sends_no_metadata() -> None:
    client = ScriptedClient([Turn(deltas=("done",))])
    Answer(client, {"model": "m", "input": "hi"}).start().wait(10)
    assert "metadata" not in client.requests[0]
