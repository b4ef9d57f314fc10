"""A question may end with ``?``: a line calling ``%lmsp`` reaches the magic whole, in a shell
that loaded the extension (with a scripted client; ``test_live.py`` asks a real kernel)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from lmsp_jupyter import load_ipython_extension, unload_ipython_extension
from lmsp_jupyter.client import MODEL_VARIABLE
from lmsp_jupyter.kernel import Answer, connect
from tests.kernel.fakes import ScriptedClient, Turn

FRANCE = "%lmsp ask --max-tokens 4 What is the capital of France?"
BLUE = "x = %lmsp ask --max-tokens 4 Why is the sky blue?"


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[InteractiveShell, ScriptedClient]]:
    """An IPython shell that loaded the extension, its answers from a scripted client."""
    monkeypatch.delenv(MODEL_VARIABLE, raising=False)
    client = ScriptedClient([Turn(deltas=("Paris",)), Turn(deltas=("Light",))])
    connect(client)
    ip = InteractiveShell.instance()
    load_ipython_extension(ip)
    yield ip, client
    unload_ipython_extension(ip)
    connect(None)


def transformed(ip: InteractiveShell, cell: str) -> str:
    """The Python that ``cell`` becomes before it runs."""
    python: str = ip.transform_cell(cell)  # type: ignore[no-untyped-call]
    return python


def ran(ip: InteractiveShell, cell: str) -> bool:
    """Whether ``cell`` ran without an error."""
    return bool(ip.run_cell(cell).success)  # type: ignore[no-untyped-call]


def asked(client: ScriptedClient) -> list[str]:
    """The prompt of each request the client was sent."""
    return [request["input"][-1]["content"] for request in client.requests]


def test_a_question_ending_in_a_question_mark_reaches_the_magic(
    shell: tuple[InteractiveShell, ScriptedClient],
) -> None:
    ip, client = shell
    assert transformed(ip, FRANCE) == (
        "get_ipython().run_line_magic("
        "'lmsp', 'ask --max-tokens 4 What is the capital of France?')\n"
    )
    assert ran(ip, FRANCE)
    assert asked(client) == ["What is the capital of France?"]


def test_an_assigned_question_reaches_the_magic_and_its_answer_the_name(
    shell: tuple[InteractiveShell, ScriptedClient],
) -> None:
    ip, client = shell
    assert transformed(ip, f"if True:\n    {BLUE}\n") == (
        "if True:\n"
        "    x = get_ipython().run_line_magic('lmsp', 'ask --max-tokens 4 Why is the sky blue?')\n"
    )
    assert ran(ip, BLUE)
    assert asked(client) == ["Why is the sky blue?"]
    answer = ip.user_ns["x"]
    assert isinstance(answer, Answer) and answer.wait().text == "Paris"


def test_the_magic_with_a_question_mark_alone_shows_its_help(
    shell: tuple[InteractiveShell, ScriptedClient], capsys: pytest.CaptureFixture[str]
) -> None:
    ip, client = shell
    assert transformed(ip, "%lmsp?") == "get_ipython().run_line_magic('pinfo', '%lmsp')\n"
    assert transformed(ip, "%lmsp??") == "get_ipython().run_line_magic('pinfo2', '%lmsp')\n"
    assert ran(ip, "%lmsp?")
    assert "Ask a local model through the LMSP service" in capsys.readouterr().out
    assert client.requests == []


def test_a_cell_magics_cell_is_left_to_the_cell_magic(
    shell: tuple[InteractiveShell, ScriptedClient],
) -> None:
    ip, _ = shell
    cell = "%%lmsp --max-tokens 4\n%lmsp ask Why?\n"
    assert transformed(ip, cell) == (
        "get_ipython().run_cell_magic('lmsp', '--max-tokens 4', '%lmsp ask Why?\\n')\n"
    )


def test_unloading_the_extension_leaves_question_marks_to_ipython(
    shell: tuple[InteractiveShell, ScriptedClient],
) -> None:
    ip, _ = shell
    unload_ipython_extension(ip)
    assert transformed(ip, FRANCE) == "get_ipython().run_line_magic('pinfo', 'France')\n"
    load_ipython_extension(ip)
    load_ipython_extension(ip)  # once only: unloading once removes it
    unload_ipython_extension(ip)
    assert transformed(ip, FRANCE) == "get_ipython().run_line_magic('pinfo', 'France')\n"
    load_ipython_extension(ip)
