"""``%lmsp`` in an IPython shell without a front end (terminal mode), with a scripted client."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from lmsp_jupyter.client import MODEL_VARIABLE, ProblemError
from lmsp_jupyter.kernel import connect
from lmsp_jupyter.kernel.answer import Answer
from lmsp_jupyter.kernel.magics import LmspMagics
from lmsp_jupyter.kernel.session import KernelSession
from lmsp_jupyter.protocol.errors import LmspError
from lmsp_jupyter.protocol.tasks import Task
from tests.kernel.fakes import ScriptedClient, Turn, note_call, note_tool


class Shell:
    """An IPython shell with ``%lmsp``, a scripted client and scripted replies to prompts."""

    def __init__(self, client: ScriptedClient, replies: list[str]) -> None:
        self.client = client
        self.prompts: list[str] = []
        self.ip = InteractiveShell.instance()
        self.session = KernelSession(self.ip, ask=self._reply)
        self.ip.register_magics(LmspMagics(self.ip, self.session))
        self._replies = replies
        connect(client)

    def _reply(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self._replies.pop(0)

    def lmsp(self, line: str) -> Any:
        return self.ip.run_line_magic("lmsp", line)


@pytest.fixture
def make_shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.delenv(MODEL_VARIABLE, raising=False)  # no server's default model

    def make(*turns: Turn, replies: list[str] | None = None) -> Shell:
        return Shell(ScriptedClient(list(turns)), replies or [])

    yield make
    connect(None)


def test_ask_prints_the_text_as_it_comes_and_returns_the_answer(
    make_shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shell = make_shell(Turn(deltas=("Bonjour", " Ada")))
    shell.ip.user_ns["name"] = "Ada"
    answer = shell.lmsp("ask --max-tokens 3 Hi {name}")
    assert isinstance(answer, Answer)
    assert (answer.status, answer.text) == ("completed", "Bonjour Ada")
    assert capsys.readouterr().out == "Bonjour Ada\n"
    assert shell.client.requests == [
        {
            "model": "loaded",
            "input": [{"type": "message", "role": "user", "content": "Hi Ada"}],
            "store": True,
            "max_output_tokens": 3,
        }
    ]


def test_without_model_an_ask_uses_the_servers_default_model(
    make_shell: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server exports ``LmspApp.default_model`` to its kernels as ``$LMSP_MODEL``."""
    monkeypatch.setenv(MODEL_VARIABLE, "m")
    shell = make_shell(Turn(deltas=("Hi",)), Turn(deltas=("Yes",)))
    shell.lmsp("ask Hello")
    shell.lmsp("ask --model loaded Hello")
    # Without $LMSP_MODEL the first loaded model ("loaded") is asked: see the test above.
    assert [request["model"] for request in shell.client.requests] == ["m", "loaded"]


def test_the_value_is_not_shown_twice(make_shell: Any, capsys: pytest.CaptureFixture[str]) -> None:
    shell = make_shell(Turn(deltas=("Hello",)), Turn(deltas=("Again",)))
    shell.ip.run_cell("a = %lmsp ask hi", store_history=True)
    assert capsys.readouterr().out == "Hello\n"
    shell.ip.run_cell(
        "%lmsp ask hi", store_history=True
    )  # the cell's value: only the status line after the text
    assert re.fullmatch(r"Again\nOut\[\d+\]: \[completed\] task_2\n", capsys.readouterr().out)
    assert shell.ip.user_ns["a"].text == "Hello"
    shell.ip.run_cell("a", store_history=True)
    assert re.fullmatch(r"Out\[\d+\]: Hello\n\[completed\] task_1\n", capsys.readouterr().out)


def test_cell_magic_takes_the_cell_as_the_prompt(make_shell: Any) -> None:
    shell = make_shell(Turn(deltas=("ok",)))
    shell.ip.run_cell_magic("lmsp", "ask --model m", "Line one\nline two\n")
    assert shell.client.requests[0]["model"] == "m"
    assert shell.client.requests[0]["input"][0]["content"] == "Line one\nline two"


def test_a_bad_option_is_one_line_without_traceback(
    make_shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shell = make_shell()
    shell.ip.run_cell("%lmsp ask --colour red hi")
    captured = capsys.readouterr()
    assert (captured.out + captured.err).strip() == "UsageError: unknown option --colour"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", "unknown subcommand '': use ask, explain, edit, models, tasks, cancel or resume"),
        (
            "frobnicate",
            "unknown subcommand 'frobnicate': "
            "use ask, explain, edit, models, tasks, cancel or resume",
        ),
        ("resume", "usage: %lmsp resume <task_id>"),
        ("models all", "usage: %lmsp models"),
        ("cancel a b", "usage: %lmsp cancel [id]"),
        ("cancel", "no ask is running"),
        ("ask --continue more", "--continue: there is no earlier answer to continue"),
    ],
)
def test_bad_subcommands(make_shell: Any, line: str, message: str) -> None:
    shell = make_shell()
    with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
        shell.lmsp(line)


def test_continue_sends_the_previous_response_id(make_shell: Any) -> None:
    shell = make_shell(Turn(deltas=("one",)), Turn(deltas=("two",)))
    shell.lmsp("ask first")
    shell.lmsp("ask --continue second")
    assert shell.client.requests[1]["previous_response_id"] == "resp_1"
    assert "previous_response_id" not in shell.client.requests[0]


def test_terminal_asks_before_running_a_tool(
    make_shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    note, ran = note_tool()
    shell = make_shell(
        note_call("x"),
        note_call("y"),
        Turn(deltas=("done",)),
        replies=["y", "n"],
    )
    shell.ip.user_ns["note"] = note
    answer = shell.lmsp("ask --tools note --tool-choice note Go")
    assert shell.prompts == [
        '\nRun note({"text": "x"})? [y/N] ',
        '\nRun note({"text": "y"})? [y/N] ',
    ]
    assert ran == ["x"]
    assert (answer.status, answer.text) == ("completed", "done")
    assert capsys.readouterr().out == (
        '\n[note({"text": "x"}) approved: noted]\n'
        '\n[note({"text": "y"}) denied: The user declined to run this function.]\n'
        "done\n"
    )
    assert shell.client.requests[0]["tool_choice"] == {"type": "function", "name": "note"}
    assert shell.client.requests[1]["tool_choice"] == "auto"


def test_models_with_their_kind_and_tasks_are_listed(
    make_shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shell = make_shell(Turn(deltas=("a",)))
    shell.lmsp("ask hi")
    capsys.readouterr()
    shell.lmsp("models")
    shell.lmsp("tasks")
    when = datetime.datetime.fromtimestamp(0).isoformat(sep=" ", timespec="seconds")
    assert capsys.readouterr().out == (
        "m  available  32  base streaming\n"
        "loaded  loaded  32  chat streaming tools\n"
        f"task_1 completed   {when}\n"
    )


def test_cancel_a_task_by_id_and_resume_a_task(
    make_shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shell = make_shell(Turn(deltas=("again",)))
    shell.lmsp("cancel task_9")
    assert shell.client.cancelled == ["task_9"]
    answer = shell.lmsp("resume task_1")
    assert (answer.task_id, answer.status, answer.text) == ("task_1", "completed", "again")
    assert capsys.readouterr().out == "task_9 is in_progress\nagain\n"


def test_a_refused_ask_is_one_line(make_shell: Any) -> None:
    class Refusing(ScriptedClient):
        def create_task(self, request: Any) -> Task:
            raise ProblemError(LmspError("model_not_found", "no model 'x'").to_problem())

    shell = make_shell()
    connect(Refusing([]))
    with pytest.raises(UsageError, match=r"^LMSP: 404 model_not_found: no model 'x'$"):
        shell.lmsp("ask --model x hi")


def test_comm_messages_reach_the_ask_by_its_id(make_shell: Any) -> None:
    shell = make_shell(Turn(deltas=("a",)))
    answer = shell.lmsp("ask hi")
    seen: list[dict[str, Any]] = []
    answer.handle_message = seen.append
    shell.session.route({"type": "stop", "ask_id": "ask_other"})
    shell.session.route({"type": "stop", "ask_id": answer.ask_id})
    assert seen == [{"type": "stop", "ask_id": answer.ask_id}]


def test_load_and_unload_the_extension() -> None:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "lmsp_jupyter")
    assert "lmsp" in ip.magics_manager.magics["line"]
    assert "lmsp" in ip.magics_manager.magics["cell"]
    ip.run_line_magic("unload_ext", "lmsp_jupyter")
    assert "lmsp" not in ip.magics_manager.magics["line"]
    assert "lmsp" not in ip.magics_manager.magics["cell"]
