"""``KernelSession``: the extension in one IPython shell, the asks it started and their clicks."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import comm
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from ..client import LmspClientError
from ..protocol.environment import MODEL_VARIABLE
from ..protocol.models import Model
from ..protocol.tasks import Task
from .answer import Answer
from .connection import TaskClient, current_client
from .context import ErrorRecorder, gather, prompt_names, raw_inputs
from .edit import EditAnswer, edit_request
from .mcp import McpApprovals
from .notebook import NotebookView
from .options import AskOptions
from .origin import ask_origin
from .request import ask_request
from .terminal import TerminalView, run_in_terminal
from .view import AnswerView

T = TypeVar("T")
A = TypeVar("A", bound=Answer)

#: The comm target the MIME renderer opens to send clicks to the kernel.
COMM_TARGET = "lmsp"


class KernelSession:
    """The asks of one shell: starts them, shows them where the shell shows things, routes clicks.

    In a kernel with a front end (ZMQ) an ask streams in the background and its display is a
    widget; elsewhere (terminal IPython) it prints as it streams and blocks until it ends.
    """

    def __init__(self, shell: InteractiveShell, *, ask: Callable[[str], str] = input) -> None:
        self.shell = shell
        self.answers: dict[str, Answer] = {}
        self.last: Answer | None = None
        self.notebook = getattr(shell, "kernel", None) is not None
        self.kernel_id = _kernel_id() if self.notebook else None
        self._ask = ask
        self._model: str | None = None
        self.errors = ErrorRecorder()
        #: The MCP tools approved "always for this tool" in this session.
        self.mcp_approvals = McpApprovals()

    @property
    def client(self) -> TaskClient:
        """The client of the LMSP service (see :func:`~lmsp_jupyter.kernel.connect`)."""
        return current_client()

    # --- subcommands --------------------------------------------------------------------------

    def ask(self, options: AskOptions) -> Answer:
        """Start an ask; in a terminal, return once it has ended."""
        previous = self._previous_response_id() if options.continue_ else None
        names = [*options.vars, *prompt_names(options.prompt, self.shell.user_ns)]
        context = gather(
            options.context, self.shell, names=dict.fromkeys(names), errors=self.errors
        )
        request, tools = ask_request(
            options,
            self.shell.user_ns,
            default_model=self._default_model,
            previous_response_id=previous,
            context=context,
            approvals=self.mcp_approvals,
        )
        notebook_only = [name for name, tool in tools.items() if tool.runs_in == "notebook"]
        if notebook_only and not self.notebook:
            raise UsageError(
                f"{', '.join(notebook_only)}: notebook tools need JupyterLab, which performs "
                "them on the notebook; this IPython has no notebook"
            )
        origin = ask_origin(getattr(self.shell, "kernel", None), self.kernel_id)
        answer = self._answer(request, tools, origin, show_prompt=bool(options.context))
        _service(answer.start)
        return self._shown(answer)

    def explain(self, options: AskOptions) -> Answer:
        """Ask about the last error, with the cell that raised it."""
        if self.errors.current() is None:
            raise UsageError("%lmsp explain: no cell has raised an error yet")
        return self.ask(replace(options, context=(*options.context, "error")))

    def edit(self, options: AskOptions) -> EditAnswer:
        """Edit the cell above as ``options.prompt`` says; wait, show the diff, offer the result."""
        source = self._cell_above()
        request = edit_request(options, source, self._default_model)
        origin = ask_origin(getattr(self.shell, "kernel", None), self.kernel_id)
        answer = self._answer(
            request, origin=origin, show_prompt=True, make=partial(EditAnswer, source=source)
        )
        assert isinstance(answer, EditAnswer)
        _service(answer.start)
        self._shown(answer).wait()
        answer.offer(self.shell)
        return answer

    def resume(self, task_id: str) -> Answer:
        """Show an existing task again, following it if it still runs."""
        task = _service(lambda: self.client.get_task(task_id))
        answer = self._answer({"model": task.result.model if task.result else "", "store": True})
        answer.follow(task.id)
        return self._shown(answer)

    def cancel(self, target: str | None = None) -> str:
        """Cancel the running ask, an ask or task of this session by id, or any task by id."""
        if target is None:
            running = [answer for answer in self.answers.values() if not answer.done]
            if not running:
                raise UsageError("no ask is running")
            running[-1].cancel()
            return f"cancelling {running[-1].task_id}"
        for answer in self.answers.values():
            if target == answer.ask_id or target in {r.task_id for r in answer.state.rounds}:
                answer.cancel()
                return f"cancelling {answer.task_id}"
        task = _service(lambda: self.client.cancel_task(target))
        return f"{task.id} is {task.status}"

    def models(self) -> list[Model]:
        """The models of the service."""
        return _service(self.client.models)

    def tasks(self) -> list[Task]:
        """The tasks of the service, newest first."""
        return _service(self.client.list_tasks)

    # --- the comm of the MIME renderer ---------------------------------------------------------

    def open(self) -> None:
        """Listen for the MIME renderer's clicks (in a kernel with a front end), and for errors."""
        self.shell.events.register("post_run_cell", self.errors)
        if self.notebook:
            comm.get_comm_manager().register_target(COMM_TARGET, self._open_comm)

    def close(self) -> None:
        """Stop listening for clicks and errors."""
        self.shell.events.unregister("post_run_cell", self.errors)
        if self.notebook:
            comm.get_comm_manager().unregister_target(COMM_TARGET, self._open_comm)

    def route(self, message: Any) -> None:
        """A click for one of this session's asks (``ask_id``); others are ignored."""
        if isinstance(message, dict) and message.get("ask_id") in self.answers:
            self.answers[message["ask_id"]].handle_message(message)

    def _open_comm(self, channel: Any, opened: dict[str, Any]) -> None:
        channel.on_msg(lambda message: self.route(message["content"]["data"]))
        self.route(opened["content"]["data"])

    # --- helpers ------------------------------------------------------------------------------

    def _answer(
        self,
        request: dict[str, Any],
        tools: dict[str, Any] | None = None,
        origin: dict[str, str] | None = None,
        *,
        show_prompt: bool = False,
        make: Callable[..., Answer] = Answer,
    ) -> Answer:
        return make(
            self.client,
            request,
            tools=tools,
            view=self._view,
            kernel_id=self.kernel_id,
            origin=origin,
            show_prompt=show_prompt,
            approvals=self.mcp_approvals,
        )

    def _view(self, answer: Answer) -> AnswerView:
        return NotebookView(answer) if self.notebook else TerminalView(answer)

    def _cell_above(self) -> str:
        """The source of the cell executed before the running one (the last in the history)."""
        inputs = raw_inputs(self.shell)
        count = len(inputs) - 2
        if count < 1 or not inputs[count].strip():
            raise UsageError("%lmsp edit: there is no cell above to edit")
        return str(inputs[count])

    def _shown(self, answer: A) -> A:
        self.answers[answer.ask_id] = answer
        self.last = answer
        if not self.notebook:
            run_in_terminal(answer, self._ask)
        return answer

    def _default_model(self) -> str:
        """The server's default model (``$LMSP_MODEL``), else the first loaded, else the first."""
        if self._model is None:
            self._model = os.environ.get(MODEL_VARIABLE) or None
        if self._model is None:
            models = self.models()
            if not models:
                raise UsageError("the LMSP service has no models")
            loaded = [model for model in models if model.status == "loaded"]
            self._model = (loaded or models)[0].id
        return self._model

    def _previous_response_id(self) -> str:
        if self.last is None:
            raise UsageError("--continue: there is no earlier answer to continue")
        if not self.last.done or self.last.response is None:
            raise UsageError(f"--continue: the earlier answer is {self.last.status}")
        return self.last.response.id


def _service(call: Callable[[], T]) -> T:
    """Call the service; its errors become one line for the user, not a traceback."""
    try:
        return call()
    except LmspClientError as exc:
        raise UsageError(f"LMSP: {exc}") from None


def _kernel_id() -> str | None:
    """This kernel's id, from its connection file ``kernel-<id>.json``."""
    try:
        from ipykernel.connect import get_connection_file

        name = Path(get_connection_file()).name
    except (ImportError, RuntimeError):
        return None
    match = re.fullmatch(r"kernel-(.+)\.json", name)
    return match[1] if match else None
