"""Notebook tools in the kernel: their schemas, and the approval flow's edges (scripted client).

JupyterLab performs an approved call and sends what it did as the ``decide`` message's
``output`` (labextension/src/notebook/tools.ts, tested with vitest; tests/ui for the real thing).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import lmsp_jupyter
from lmsp_jupyter.kernel import connect
from lmsp_jupyter.kernel.answer import Answer
from lmsp_jupyter.kernel.notebook_tools import (
    NEEDS_JUPYTERLAB,
    insert_cell,
    notebook_tools,
    read_cell,
    replace_cell,
    run_cell,
)
from lmsp_jupyter.kernel.options import parse_ask
from lmsp_jupyter.kernel.request import ask_request
from lmsp_jupyter.kernel.session import KernelSession
from lmsp_jupyter.kernel.tools import DECLINED, tool
from tests.kernel.fakes import RecordingView, ScriptedClient, Turn, note_tool

INSERT = '{"source": "print(1)"}'


def ask(client: ScriptedClient, **tools: Any) -> tuple[Answer, list[RecordingView]]:
    """An ask offering the notebook tools (and ``tools``), once its first round has ended."""
    offered = {**notebook_tools(), **tools}
    views: list[RecordingView] = []

    def view(answer: Answer) -> RecordingView:
        views.append(RecordingView(answer))
        return views[-1]

    request = {"model": "m", "input": "hi", "tools": [t.definition() for t in offered.values()]}
    return Answer(client, request, tools=offered, view=view).start().wait(5), views


def outputs(client: ScriptedClient) -> list[str]:
    """The function call outputs the second round gave the model."""
    return [item["output"] for item in client.requests[1]["input"]]


def decide(answer: Answer, decision: str, **extra: Any) -> None:
    """A ``decide`` message on the ``lmsp`` comm, as the MIME renderer sends it."""
    message = {"type": "decide", "ask_id": answer.ask_id, "call_id": "call_1_0"}
    answer.handle_message({**message, "decision": decision, **extra})
    answer.wait(5)


def test_the_four_tools_their_schemas_and_policy() -> None:
    tools = notebook_tools()
    assert list(tools) == ["read_cell", "insert_cell", "replace_cell", "run_cell"]
    assert [lmsp_jupyter.read_cell, lmsp_jupyter.insert_cell] == [read_cell, insert_cell]
    assert lmsp_jupyter.notebook_tools() == tools
    assert {(t.policy, t.runs_in) for t in tools.values()} == {("ask", "notebook")}
    relative = {
        "type": "boolean",
        "default": False,
        "description": "Count index from the cell that asks instead of from the first cell.",
    }
    index = {
        "type": "integer",
        "description": "Which cell: from 0, the first cell of the notebook; with relative, "
        "counted from the cell that asks (-1 is the cell above it).",
    }
    for addressed in (read_cell, run_cell):
        assert addressed.parameters == {
            "type": "object",
            "properties": {"index": index, "relative": relative},
            "required": ["index"],
            "additionalProperties": False,
        }
    assert replace_cell.parameters["required"] == ["index", "source"]
    assert insert_cell.definition() == {
        "type": "function",
        "name": "insert_cell",
        "description": "Insert a new cell into this notebook; the output gives the index it got.",
        "parameters": {
            "type": "object",
            "properties": {
                "source": {"type": "string", "description": "The new cell's source."},
                "index": {
                    "anyOf": [{"type": "integer"}, {"type": "null"}],
                    "default": None,
                    "description": "The position of the new cell: from 0, the top of the "
                    "notebook (past the end appends); with relative, counted from the cell "
                    "that asks (1 is right below it). Without index the cell goes right below "
                    "the cell that asks.",
                },
                "relative": relative,
                "cell_type": {
                    "type": "string",
                    "enum": ["code", "markdown"],
                    "default": "code",
                    "description": "A code or a Markdown cell.",
                },
            },
            "required": ["source"],
            "additionalProperties": False,
        },
    }


#: Where the lab extension checks an approved call's arguments before performing it.
LAB_TOOLS = Path(__file__).resolve().parents[2] / "labextension/src/notebook/tools.ts"


def lab_parameters() -> dict[str, tuple[dict[str, str], list[str]]]:
    """``PARAMETERS`` of the lab extension's notebook tools: each tool's types and required."""
    source = LAB_TOOLS.read_text()
    block = source[source.index("const PARAMETERS") :]
    block = block[: block.index("\n};")]
    entry = re.compile(r"(\w+): \{\s*types: \{([^}]*)\},\s*required: \[([^\]]*)\]")
    return {
        match[1]: (dict(re.findall(r"(\w+): '(\w+)'", match[2])), re.findall(r"'(\w+)'", match[3]))
        for match in entry.finditer(block)
    }


def lab_type(schema: dict[str, Any]) -> str:
    """The lab extension's name of a parameter's JSON Schema."""
    if schema.get("enum") == ["code", "markdown"]:
        return "cell_type"
    if schema.get("anyOf") == [{"type": "integer"}, {"type": "null"}]:
        return "integer_or_null"
    return str(schema["type"])


def test_the_lab_extension_checks_the_parameters_the_kernel_offers() -> None:
    offered = {}
    for name, offered_tool in notebook_tools().items():
        schema = offered_tool.parameters
        types = {key: lab_type(value) for key, value in schema["properties"].items()}
        offered[name] = (types, schema["required"])
    assert lab_parameters() == offered


def test_a_call_waits_for_approval_marked_as_the_notebooks() -> None:
    client = ScriptedClient([Turn(calls=(("insert_cell", INSERT),))])
    answer, _ = ask(client)
    assert answer.status == "requires_action"
    assert answer.state_json()["tool_calls"]["call_1_0"] == {
        "name": "insert_cell",
        "arguments": INSERT,
        "decision": "pending",
        "output": None,
        "runs_in": "notebook",
    }


def test_approved_in_jupyterlab_the_model_gets_what_it_did() -> None:
    client = ScriptedClient([Turn(calls=(("insert_cell", INSERT),)), Turn(deltas=("Done.",))])
    answer, views = ask(client)
    done = '{"index":2,"cell_type":"code"}'
    decide(answer, "approve", output=done)
    assert (answer.status, answer.text) == ("completed", "Done.")
    assert client.requests[1]["input"] == [
        {"type": "function_call_output", "call_id": "call_1_0", "output": done}
    ]
    call = views[0].states[-1]["tool_calls"]["call_1_0"]
    assert (call["decision"], call["output"]) == ("approved", done)


def test_a_denied_call_changes_nothing_and_the_model_is_told() -> None:
    client = ScriptedClient([Turn(calls=(("replace_cell", INSERT),)), Turn(deltas=("Ok",))])
    answer, _ = ask(client)
    # an output with a denial is not something that happened: the model gets the denial
    decide(answer, "deny", output='{"index":0,"cell_type":"code"}')
    assert outputs(client) == [DECLINED]
    call = answer.state.tool_calls["call_1_0"]
    assert (call.decision, call.output) == ("denied", DECLINED)


def test_an_unknown_cell_index_is_a_tool_error_and_the_ask_goes_on() -> None:
    client = ScriptedClient([Turn(calls=(("read_cell", '{"index": 9}'),)), Turn(deltas=("Ok",))])
    answer, _ = ask(client)
    error = "error: there is no cell at index 9: the notebook has 3 cells, 0 to 2"
    decide(answer, "approve", output=error)
    assert outputs(client) == [error]
    assert (answer.status, answer.state.error) == ("completed", None)


@pytest.mark.parametrize(
    ("arguments", "output"),
    [
        ('{"index": 1}', NEEDS_JUPYTERLAB.format(name="run_cell")),
        (
            '{"index": "one"}',
            "error: the arguments do not fit run_cell: index: Input should be a valid integer, "
            "unable to parse string as an integer",
        ),
    ],
)
def test_approved_outside_jupyterlab_the_model_is_told_they_need_it(
    arguments: str, output: str
) -> None:
    client = ScriptedClient([Turn(calls=(("run_cell", arguments),)), Turn(deltas=("Ok",))])
    answer, _ = ask(client)
    answer.approve()  # as from code, or the anywidget view's Approve: no output comes with it
    answer.wait(5)
    assert outputs(client) == [output]
    assert output.startswith("error: ")


def test_an_output_sent_for_a_kernel_tool_is_not_its_output() -> None:
    note, ran = note_tool()
    client = ScriptedClient([Turn(calls=(("note", '{"text": "a"}'),)), Turn(deltas=("Ok",))])
    answer, views = ask(client, note=note)
    decide(answer, "approve", output="made up")
    assert ran == ["a"]
    assert outputs(client) == ["noted"]
    # the state of a kernel's tool is what it always was: no runs_in
    assert "runs_in" not in views[0].states[-1]["tool_calls"]["call_1_0"]


def request_of(line: str, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    request, _ = ask_request(parse_ask(line), namespace or {}, default_model=lambda: "m")
    return request


def test_notebook_tools_option_offers_the_four_and_can_force_one() -> None:
    request = request_of("--notebook-tools --tool-choice insert_cell add a cell")
    assert [t["name"] for t in request["tools"]] == list(notebook_tools())
    assert request["tool_choice"] == {"type": "function", "name": "insert_cell"}
    note, _ = note_tool()
    request = request_of(
        "--tools note,read_cell --notebook-tools hi", {"note": note, **notebook_tools()}
    )
    assert [t["name"] for t in request["tools"]] == ["note", *notebook_tools()]
    # one tool alone, to offer fewer
    request = request_of("--tools read_cell hi", {"read_cell": read_cell})
    assert request["tools"] == [read_cell.definition()]


def test_a_tool_of_the_same_name_clashes() -> None:
    def mine(text: str) -> str:
        return text

    clash = tool(name="read_cell")(mine)
    with pytest.raises(
        UsageError, match=r"^--tools: read_cell clashes with a notebook tool's name$"
    ):
        request_of("--tools mine --notebook-tools hi", {"mine": clash})


def test_a_terminal_refuses_them_saying_they_need_jupyterlab() -> None:
    client = ScriptedClient([])
    connect(client)
    try:
        session = KernelSession(InteractiveShell.instance())
        with pytest.raises(
            UsageError,
            match=r"^read_cell, insert_cell, replace_cell, run_cell: "
            r"notebook tools need JupyterLab, which performs them on the notebook; "
            r"this IPython has no notebook$",
        ):
            session.ask(parse_ask("--model m --notebook-tools hi"))
    finally:
        connect(None)
    assert client.requests == []
