"""``--context``: each source, the budget, DataFrame summaries, the last error, ``explain``,
``edit`` and the assembled prompt (a snapshot: it is the kernel's text, not the model's)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from lmsp_jupyter.client import MODEL_VARIABLE
from lmsp_jupyter.kernel import connect
from lmsp_jupyter.kernel.context import (
    CHARS_PER_TOKEN,
    ErrorRecorder,
    cells_section,
    error_section,
    prompt_names,
    summary,
    trim,
)
from lmsp_jupyter.kernel.display import text_bundle
from lmsp_jupyter.kernel.edit import EditAnswer
from lmsp_jupyter.kernel.magics import LmspMagics
from lmsp_jupyter.kernel.session import KernelSession
from lmsp_jupyter.protocol.cell_edit import EDIT_STOP
from lmsp_jupyter.protocol.models import EXTENSION_KEY
from tests.kernel.fakes import ScriptedClient, Turn


def test_trim_keeps_whole_lines_and_marks_the_rest() -> None:
    text = "\n".join(f"line {n:03}" for n in range(100))  # 9 characters a line
    trimmed = trim(text, budget=10)  # 40 characters: 4 lines
    assert trimmed.splitlines() == [*(f"line {n:03}" for n in range(4)), "… [trimmed 96 lines]"]
    assert trim(text, budget=len(text) // CHARS_PER_TOKEN + 1) == text


def test_trim_cuts_one_long_line() -> None:
    assert trim("x" * 100, budget=2) == "x" * 8 + "\n… [trimmed 1 lines]"


def test_cells_are_those_before_the_running_one_with_their_results() -> None:
    inputs = ["", "a = 1", "a + 1", "   ", "%lmsp ask --context cells what is a?"]
    section = cells_section(inputs, {2: 2})
    assert section == "In [1]:\na = 1\nIn [2]:\na + 1\nOut[2]:\n2"


def test_a_pandas_frame_is_its_schema_shape_and_first_rows() -> None:
    frame = pd.DataFrame({"city": ["Oslo", "Lima", "Pune", "Kyiv"], "people": [1, 2, 3, 4]})
    text = summary(frame)
    city = frame.dtypes["city"]  # object or str, by pandas version
    assert text.startswith(f"pandas.DataFrame, shape (4, 2), columns:\n  city: {city}\n")
    assert "  people: int64" in text
    assert "Pune" in text and "Kyiv" not in text  # three rows


def test_a_polars_frame_is_its_schema_shape_and_first_rows() -> None:
    pl = pytest.importorskip("polars")
    text = summary(pl.DataFrame({"city": ["Oslo", "Lima", "Pune", "Kyiv"], "n": [1, 2, 3, 4]}))
    assert text.startswith("polars.DataFrame, shape (4, 2), columns:\n  city: String")
    assert "Pune" in text and "Kyiv" not in text


def test_an_array_is_its_shape_and_dtype_and_others_a_bounded_repr() -> None:
    assert (
        summary(np.zeros((3, 2), dtype=np.float32)) == "numpy.ndarray, shape (3, 2), dtype float32"
    )
    assert summary({"a": 1}) == "dict {'a': 1}"
    assert len(summary("y" * 10_000)) < 500


def test_the_prompt_names_variables_of_the_namespace_only() -> None:
    namespace = {"df": 1, "np": np, "_hidden": 2, "In": [], "mean": 3}
    assert prompt_names("what is the mean of df? and np, _hidden, In", namespace) == ["mean", "df"]


class Shell:
    def __init__(self, client: ScriptedClient) -> None:
        self.client = client
        self.ip = InteractiveShell.instance()
        assert self.ip.history_manager is not None
        self.ip.history_manager.reset()
        self.ip.execution_count = 1
        self.session = KernelSession(self.ip)
        self.session.open()
        self.ip.register_magics(LmspMagics(self.ip, self.session))
        connect(client)

    def run(self, source: str) -> None:
        self.ip.run_cell(source, store_history=True)  # type: ignore[no-untyped-call]


@pytest.fixture
def make_shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv(MODEL_VARIABLE, "m")
    shells: list[Shell] = []

    def make(*turns: Turn) -> Shell:
        shells.append(Shell(ScriptedClient(list(turns))))
        return shells[-1]

    yield make
    for shell in shells:
        shell.session.close()
    connect(None)


def test_the_assembled_prompt_snapshot(make_shell: Any) -> None:
    shell = make_shell(Turn(deltas=("ok",)))
    shell.run("sales = [3, 1, 2]")
    shell.run("len(sales)")
    shell.run("q = 'so few'")
    shell.run("1 / 0")
    shell.run("answer = %lmsp ask --context cells,vars,error why are sales {q}?")
    answer = shell.ip.user_ns["answer"]
    assert answer.prompt == shell.client.requests[0]["input"][0]["content"]
    assert answer.prompt == (
        "## Notebook cells executed so far, oldest first\n"
        "In [1]:\nsales = [3, 1, 2]\n"
        "In [2]:\nlen(sales)\nOut[2]:\n3\n"
        "In [3]:\nq = 'so few'\n"
        "In [4]:\n1 / 0\n\n"
        "## Variables\n"
        "sales: list [3, 1, 2]\n"
        "q: str 'so few'\n\n"
        "## The last error\n"
        "In [4]:\n1 / 0\n"
        "Traceback (most recent call last):\n"
        '  File "Cell In[4]", line 1, in <module>\n'
        "    1 / 0\n"
        "    ~~^~~\n"
        "ZeroDivisionError: division by zero\n\n"
        "why are sales so few?"
    )
    assert answer.state_json()["prompt"] == answer.prompt  # the widget folds it
    markdown = text_bundle(answer)["text/markdown"]
    assert markdown.endswith(
        f"<details><summary>Prompt</summary>\n\n```text\n{answer.prompt}\n```\n\n</details>"
    )


def test_an_ask_without_context_carries_no_prompt_in_its_state(make_shell: Any) -> None:
    shell = make_shell(Turn(deltas=("ok",)))
    shell.run("plain = %lmsp ask hello")
    answer = shell.ip.user_ns["plain"]
    assert answer.prompt == "hello"
    assert answer.state_json()["prompt"] is None
    assert "<details>" not in text_bundle(answer)["text/markdown"]


def test_the_last_error_is_the_failing_cell_and_its_traceback(make_shell: Any) -> None:
    shell = make_shell(Turn(deltas=("ok",)))
    shell.run("def f(x):\n    return x['missing']")
    shell.run("f({})")
    shell.run("answer = %lmsp explain")
    prompt = shell.ip.user_ns["answer"].prompt
    assert prompt.startswith(
        "## The last error\nIn [2]:\nf({})\nTraceback (most recent call last):\n"
    )
    assert "return x['missing']" in prompt
    assert prompt.endswith(
        "KeyError: 'missing'\n\nExplain this error: what went wrong in the cell, and how to fix it."
    )
    assert "interactiveshell.py" not in prompt


def test_explain_without_an_error_is_a_usage_message_every_time(
    make_shell: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(sys, "last_value", raising=False)
    shell = make_shell()
    shell.run("%lmsp explain")
    shell.run("%lmsp explain")  # its own usage message is not an error to explain
    assert shell.session.errors.current() is None
    with pytest.raises(UsageError, match="no cell has raised an error yet"):
        shell.ip.run_line_magic("lmsp", "explain")
    assert shell.client.requests == []


def test_without_a_recorded_cell_the_error_is_ipythons_last_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    empty: dict[str, int] = {}
    try:
        empty["gone"]
    except KeyError as exc:
        monkeypatch.setattr(sys, "last_value", exc, raising=False)
    last = ErrorRecorder().current()
    assert last is not None and last.source is None
    section = error_section(last)
    assert section.startswith("Traceback (most recent call last):\n")
    assert section.endswith("KeyError: 'gone'")


def test_edit_sends_the_shared_prompt_and_offers_the_new_source(make_shell: Any) -> None:
    shell = make_shell(Turn(deltas=("count = 1\nprint(count)\n",)))
    shell.run("x = 1\nprint(x)\n")
    shell.run("answer = %lmsp edit rename x to count")
    answer = shell.ip.user_ns["answer"]
    (request,) = shell.client.requests
    assert request["input"][0]["content"].startswith("Instruction: rename x to count\n\nBefore:")
    assert request["stop"] == EDIT_STOP
    prediction = request["extensions"][EXTENSION_KEY]["prediction"]["content"]
    assert prediction == "x = 1\nprint(x)\n```"
    assert isinstance(answer, EditAnswer)
    assert answer.new_source == "count = 1\nprint(count)"
    assert "-x = 1\n-print(x)\n+count = 1\n+print(count)" in answer.diff()
    assert shell.ip.rl_next_input == "count = 1\nprint(count)"


def test_edit_without_a_cell_above_is_a_usage_message(make_shell: Any) -> None:
    shell = make_shell()
    with pytest.raises(UsageError, match="no cell above"):
        shell.ip.run_line_magic("lmsp", "edit make it faster")
