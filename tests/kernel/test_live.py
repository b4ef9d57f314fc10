"""``%lmsp`` end to end: a real IPython kernel and terminal IPython against the live server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from lmsp_jupyter.kernel.display import TASK_MIME, WIDGET_MIME
from lmsp_jupyter.kernel.origin import source_hash
from tests.conftest import LiveServer

FINAL = ("completed", "incomplete")


@dataclass
class Kernel:
    """A running IPython kernel and every IOPub message it has sent so far."""

    client: BlockingKernelClient
    kernel_id: str
    iopub: list[dict[str, Any]] = field(default_factory=list)

    def run(self, code: str, timeout: float = 240) -> tuple[str, list[dict[str, Any]]]:
        """Run ``code``; its stdout and its IOPub messages (the kernel's idle ends them)."""
        msg_id = self.client.execute(code)
        mine: list[dict[str, Any]] = []
        while True:
            message = self.client.get_iopub_msg(timeout=timeout)
            self.iopub.append(message)
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            mine.append(message)
            content = message["content"]
            assert message["msg_type"] != "error", "\n".join(content["traceback"])
            assert content.get("name") != "stderr", content["text"]
            if message["msg_type"] == "status" and content["execution_state"] == "idle":
                break
        stdout = "".join(
            m["content"]["text"]
            for m in mine
            if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
        )
        return stdout, mine


def lmsp_env(server: LiveServer) -> dict[str, str]:
    return {**os.environ, "LMSP_URL": server.lmsp, "LMSP_TOKEN": server.token}


@pytest.fixture(scope="module")
def kernel(live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    home = tmp_path_factory.mktemp("kernel")
    kernel_id = str(uuid.uuid4())  # named as a Jupyter server names it: kernel-<id>.json
    manager = KernelManager(
        kernel_name="python3", connection_file=str(home / f"kernel-{kernel_id}.json")
    )
    manager.start_kernel(env=lmsp_env(live_server), cwd=str(home))
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    started = Kernel(client, kernel_id)
    started.run("%load_ext lmsp_jupyter")
    yield started
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def displays(messages: list[dict[str, Any]], display_id: str | None = None) -> list[dict[str, Any]]:
    """The display and update_display messages (of one display id) in ``messages``."""
    return [
        m
        for m in messages
        if m["msg_type"] in ("display_data", "update_display_data")
        and display_id in (None, m["content"]["transient"]["display_id"])
    ]


def test_ask_streams_in_the_background_and_updates_its_display(kernel: Kernel) -> None:
    _, started = kernel.run("a = %lmsp ask --max-tokens 8 --temperature 0 The capital of France is")
    (first,) = displays(started)
    assert first["msg_type"] == "display_data"
    display_id = first["content"]["transient"]["display_id"]
    assert list(first["content"]["data"]) == [WIDGET_MIME, TASK_MIME, "text/markdown", "text/plain"]
    assert first["content"]["data"][TASK_MIME]["status"] == "queued"

    printed, _ = kernel.run(
        "import json; a.wait(120); print(a.status, a.task_id, json.dumps(a.text))"
    )
    status, task_id, text = printed.strip().split(" ", 2)
    assert status in FINAL
    assert json.loads(text).strip()

    updates = displays(kernel.iopub, display_id)[1:]
    # the end, from the asking cell, and again from the cell that waited; never per token
    assert [m["msg_type"] for m in updates] == ["update_display_data"] * 2
    end, again = updates
    state = end["content"]["data"][TASK_MIME]
    assert (state["status"], state["rounds"][0]["task_id"]) == (status, task_id)
    assert state["rounds"][0]["response"]["status"] == status
    # watched live: the decode time of a saved answer, for its tokens/s (CPU: far below 1000/s)
    seconds = state["rounds"][0]["seconds"]
    output_tokens = state["rounds"][0]["response"]["usage"]["output_tokens"]
    assert seconds > 0 and output_tokens / seconds < 1000
    assert state["kernel_id"] == kernel.kernel_id
    # the answer, then its status line; the whole stripped (a base model's continuation may
    # start with a space)
    plain = f"{json.loads(text)}\n[{status}] {task_id}".strip()
    assert end["content"]["data"]["text/plain"] == plain
    # the thread's messages belong to the cell that asked; a headless runner, reading only
    # the cell it runs, gets the final state from the waiting cell
    assert end["parent_header"]["msg_id"] == first["parent_header"]["msg_id"]
    assert again["parent_header"]["msg_id"] != first["parent_header"]["msg_id"]
    assert again["content"]["data"] == end["content"]["data"]

    events = [
        event
        for m in kernel.iopub
        if m["msg_type"] == "comm_msg" and m["content"]["data"].get("method") == "custom"
        for event in m["content"]["data"]["content"]["events"]
    ]
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["event"] == f"response.{status}"


def test_forced_tool_call_runs_in_the_kernel_and_continues(kernel: Kernel) -> None:
    kernel.run(
        """
from typing import Annotated
from pydantic import Field
import lmsp_jupyter

calls = []

@lmsp_jupyter.tool(policy="always")
def f(city: Annotated[str, Field(max_length=12)]) -> str:
    '''The weather of a city.'''
    calls.append(city)
    return "sunny"
"""
    )
    kernel.run(
        "b = %lmsp ask --tools f --tool-choice f --max-tokens 40 --temperature 0 "
        "The weather in Paris:"
    )
    printed, _ = kernel.run(
        "import json; b.wait(180); s = b.state\n"
        "print(json.dumps([calls, b.status, [r.task_id for r in s.rounds],"
        " {k: v.model_dump() for k, v in s.tool_calls.items()}]))"
    )
    calls, status, rounds, tool_calls = json.loads(printed)
    assert status in FINAL
    assert len(rounds) == 2
    (call,) = tool_calls.values()
    # The function ran once, in the kernel, with the city the model chose.
    (city,) = calls
    assert json.loads(call.pop("arguments")) == {"city": city}
    assert call == {"name": "f", "decision": "auto", "output": "sunny"}


def test_approval_through_the_lmsp_comm_runs_the_tool_on_the_main_thread(kernel: Kernel) -> None:
    kernel.run(
        """
import threading
import lmsp_jupyter

ran = []

@lmsp_jupyter.tool
def g(city: str) -> str:
    "The weather of a city."
    ran.append([city, threading.current_thread() is threading.main_thread()])
    return "rainy"
"""
    )
    kernel.run("e = %lmsp ask --tools g --tool-choice g --max-tokens 40 --temperature 0 Rome:")
    printed, _ = kernel.run(
        "import json; e.wait(120); print(json.dumps([e.status, e.ask_id, list(e.pending_calls())]))"
    )
    status, ask_id, (call_id,) = json.loads(printed)
    assert status == "requires_action"

    decide = {"type": "decide", "ask_id": ask_id, "call_id": call_id, "decision": "approve"}
    opened = {"comm_id": uuid.uuid4().hex, "target_name": "lmsp", "data": decide}
    kernel.client.shell_channel.send(kernel.client.session.msg("comm_open", opened))
    printed, _ = kernel.run(
        "e.wait(120); print(json.dumps([ran, e.status, len(e.state.rounds),"
        f" e.state.tool_calls[{call_id!r}].model_dump()]))"
    )
    ran, status, rounds, call = json.loads(printed)
    assert ran == [[json.loads(call["arguments"])["city"], True]]
    assert status in FINAL and rounds == 2
    assert (call["decision"], call["output"]) == ("approved", "rainy")


def test_an_ask_from_a_notebook_cell_records_where_it_came_from(
    kernel: Kernel, live_server: LiveServer
) -> None:
    # as jupyter-server starts a notebook's kernel: the session's path under its root
    kernel.run(
        "import os; os.environ.update(JPY_SESSION_NAME='/srv/root/dir/x.ipynb',"
        " LMSP_ROOT_DIR='/srv/root')"
    )
    code = "f = %lmsp ask --max-tokens 2 --temperature 0 Hello"
    # as JupyterLab runs a cell: its id in the execute request's metadata
    content = {"code": code, "silent": False, "store_history": True}
    request = kernel.client.session.msg("execute_request", content, metadata={"cellId": "c-42"})
    kernel.client.shell_channel.send(request)
    kernel.client.get_shell_msg(timeout=60)
    printed, _ = kernel.run(
        "f.wait(120); print(f.task_id, f.ask_id); del os.environ['JPY_SESSION_NAME']"
    )
    task_id, ask_id = printed.split()
    with live_server.client() as client:
        task = client.get(f"/tasks/{task_id}").json()
    assert task["metadata"] == {
        "notebook": "dir/x.ipynb",
        "cell": "c-42",
        "source_hash": source_hash(code),
        "kernel": kernel.kernel_id,
        "ask": ask_id,
    }


def test_continue_carries_the_previous_answer(kernel: Kernel) -> None:
    kernel.run("c = %lmsp ask --max-tokens 6 --temperature 0 Paris is in")
    kernel.run("c.wait(120)")
    _, asked = kernel.run("%lmsp ask --continue --max-tokens 6 --temperature 0 and Rome is in")
    # the cell's value is the answer, shown once: by the magic's display, not as a result again
    shown = [m["msg_type"] for m in asked if m["msg_type"] in ("display_data", "execute_result")]
    assert shown == ["display_data"]
    kernel.run("d = _")
    printed, _ = kernel.run(
        "d.wait(120); print(c.response.usage.input_tokens, c.response.usage.output_tokens,"
        " d.response.usage.input_tokens, d.status)"
    )
    first_input, first_output, second_input, status = printed.split()
    assert status in FINAL
    # the second prompt alone is a few tokens; with the first turn before it, more than both
    assert int(second_input) > int(first_input) + int(first_output)


def test_a_question_ending_in_a_question_mark_is_asked_with_it(kernel: Kernel) -> None:
    kernel.run("%lmsp ask --max-tokens 4 --temperature 0 What is the capital of France?")
    kernel.run("q = _")
    kernel.run("x = %lmsp ask --max-tokens 4 --temperature 0 Why is the sky blue?")
    printed, _ = kernel.run(
        "import json; q.wait(120); x.wait(120)\n"
        "print(json.dumps([q.prompt, x.prompt, q.status, x.status]))"
    )
    france, blue, *statuses = json.loads(printed)
    assert (france, blue) == ("What is the capital of France?", "Why is the sky blue?")
    assert set(statuses) <= set(FINAL)
    reply = kernel.client.execute_interactive("%lmsp?", timeout=60)
    (page,) = reply["content"]["payload"]
    assert "Ask a local model through the LMSP service" in page["data"]["text/plain"]


def test_terminal_ipython_prints_the_text_as_it_comes(
    live_server: LiveServer, tmp_path: Path
) -> None:
    script = tmp_path / "ask.ipy"
    script.write_text(
        "%load_ext lmsp_jupyter\n"
        "a = %lmsp ask --max-tokens 8 --temperature 0 The capital of France is\n"
        "import json; print('TEXT', a.task_id, a.status, json.dumps(a.text))\n"
    )
    ipython = Path(sys.executable).with_name("ipython")
    result = subprocess.run(
        [str(ipython), "--no-banner", "--colors=nocolor", str(script)],
        env=lmsp_env(live_server),
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    streamed, _, last = result.stdout.rpartition("TEXT ")
    task_id, status, text = last.strip().split(" ", 2)
    ending = "" if status == "completed" else f"[{status}]\n"
    assert json.loads(text)
    assert streamed == f"{json.loads(text)}\n{ending}"
    with live_server.client() as client:  # plain IPython records no origin
        assert client.get(f"/tasks/{task_id}").json()["metadata"] == {}


def fail(kernel: Kernel, code: str, timeout: float = 60) -> None:
    """Run ``code``, which must raise in the kernel."""
    msg_id = kernel.client.execute(code)
    errors = []
    while True:
        message = kernel.client.get_iopub_msg(timeout=timeout)
        kernel.iopub.append(message)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "error":
            errors.append(message["content"]["ename"])
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            break
    assert errors, f"{code!r} raised nothing"


def test_context_vars_puts_the_dataframe_schema_in_the_prompt(kernel: Kernel) -> None:
    kernel.run(
        "import pandas as pd\n"
        "sales = pd.DataFrame({'city': ['Oslo', 'Lima', 'Pune'], 'units': [3, 9, 4]})"
    )
    _, asked = kernel.run(
        "v = %lmsp ask --context vars --max-tokens 8 --temperature 0 Which city in sales sold most"
    )
    printed, _ = kernel.run("import json; v.wait(120); print(json.dumps([v.status, v.prompt]))")
    status, prompt = json.loads(printed)
    assert status in FINAL
    assert "sales: pandas.DataFrame, shape (3, 2), columns:" in prompt
    assert "  units: int64" in prompt
    assert prompt.endswith("Which city in sales sold most")
    (first,) = displays(asked)
    assert "<details><summary>Prompt</summary>" in first["content"]["data"]["text/markdown"]


def test_explain_sends_the_last_error_with_its_cell(kernel: Kernel) -> None:
    fail(kernel, "def first(d):\n    return d['missing']\nfirst({})")
    kernel.run("x = %lmsp explain --max-tokens 8 --temperature 0")
    printed, _ = kernel.run("import json; x.wait(120); print(json.dumps([x.status, x.prompt]))")
    status, prompt = json.loads(printed)
    assert status in FINAL
    assert prompt.startswith("## The last error\n")
    assert "first({})" in prompt and "return d['missing']" in prompt
    assert "KeyError: 'missing'" in prompt


def test_edit_shows_a_diff_and_offers_the_new_source(kernel: Kernel) -> None:
    kernel.run("y = 1\nprint(y)")
    _, edited = kernel.run("c = %lmsp edit --max-tokens 24 rename y to total")
    diffs = [
        m["content"]["data"]["text/markdown"]
        for m in edited
        if m["msg_type"] == "display_data"
        and "text/markdown" in m["content"]["data"]
        and m["content"]["data"]["text/markdown"].startswith("```diff\n")
    ]
    assert len(diffs) == 1
    printed, _ = kernel.run(
        "import json\n"
        "print(json.dumps([c.status, type(c.new_source).__name__, c.source, c.prompt]))"
    )
    status, kind, source, prompt = json.loads(printed)
    assert status in FINAL and kind == "str"
    assert source == "y = 1\nprint(y)"
    assert prompt.startswith("Instruction: rename y to total\n\nBefore:\n```python\ny = 1\n")
