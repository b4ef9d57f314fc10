"""``%lmsp`` and ``%%lmsp``: parse the line, call the session, print listings."""

from __future__ import annotations

import datetime
import re

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from ..protocol.models import EXTENSION_KEY, Model
from .answer import Answer
from .options import parse_ask
from .session import KernelSession

_SUBCOMMANDS = "ask, explain, edit, models, tasks, cancel or resume"
#: What ``%lmsp explain`` asks when the line adds nothing.
EXPLAIN = "Explain this error: what went wrong in the cell, and how to fix it."
_ASK = re.compile(r"^ask(\s|$)")


@magics_class
class LmspMagics(Magics):
    """The ``%lmsp`` magics of one shell; the work happens in its :class:`KernelSession`."""

    def __init__(self, shell: InteractiveShell, session: KernelSession) -> None:
        super().__init__(shell)
        self.session = session

    @no_var_expand
    @line_cell_magic
    def lmsp(self, line: str, cell: str | None = None) -> Answer | None:
        """Ask a local model through the LMSP service of this Jupyter server.

        %lmsp ask [options] <prompt>      the prompt is the rest of the line
        %%lmsp [options]                  the prompt is the cell
        %lmsp explain [options] [prompt]  the last error and its cell, explained
        %lmsp edit [options] <instruction> the cell above edited: a diff, the new source
                                          in the next input (answer.new_source)
        %lmsp models | tasks | cancel [id] | resume <task_id>

        Options: --model ID (default: the server's LmspApp.default_model, else the first
        loaded model, else the first listed), --system TEXT, --max-tokens N, --temperature T,
        --frequency-penalty F and --presence-penalty P (-2 to 2: against loops), --logprobs N
        (token logprobs with N alternatives, 0-20: answer.logprobs, shading in the view),
        --json NAME|JSON (a JSON Schema dict or pydantic model in the namespace, or a schema),
        --tools f,g (functions decorated with @lmsp_jupyter.tool), --notebook-tools
        (read_cell, insert_cell, replace_cell, run_cell: the model works on this notebook,
        each call approved in the cell; JupyterLab performs them), --mcp files,calc (the
        tools of the MCP servers the service runs under those labels, each call approved in
        the cell, or "always for this tool" for this kernel session),
        --tool-choice auto|required|none|NAME|LABEL:TOOL (the first round only; LABEL:TOOL
        is a tool of an --mcp server), --continue (from the
        previous answer), --prediction TEXT (the answer as expected, mostly, such as the code
        being edited: the model verifies it a stretch at a time, faster, same answer),
        --context cells,vars,error (in front of the prompt: the cells this session ran with
        their results, the variables the prompt names or --vars a,b lists summarized, the
        last error with its cell; each trimmed to a token budget; answer.prompt shows it).
        {name} in the prompt, the system text and the prediction is the value of ``name``.
        A prompt may end with "?" (a question); %lmsp? alone shows this help.
        The value is an Answer: .text, .prompt, .logprobs, .output, .response, .wait(), .approve(),
        .deny(), .cancel().
        """
        if cell is not None:
            return self.session.ask(parse_ask(_ASK.sub("", line.strip()), cell))
        command, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        if command == "ask":
            return self.session.ask(parse_ask(rest))
        if command == "explain":
            return self.session.explain(parse_ask(rest, default=EXPLAIN))
        if command == "edit":
            if not rest:
                raise UsageError("usage: %lmsp edit [options] <instruction>")
            return self.session.edit(parse_ask(rest))
        if command == "models" and not rest:
            for model in self.session.models():
                print(_model_line(model))
        elif command == "tasks" and not rest:
            for task in self.session.tasks():
                print(task.id, f"{task.status:<11}", _when(task.created_at))
        elif command == "cancel" and " " not in rest:
            print(self.session.cancel(rest or None))
        elif command == "resume" and rest and " " not in rest:
            return self.session.resume(rest)
        elif command in ("models", "tasks", "cancel", "resume"):
            raise UsageError(f"usage: %lmsp {_USAGE[command]}")
        else:
            raise UsageError(f"unknown subcommand {command!r}: use {_SUBCOMMANDS}")
        return None


_USAGE = {
    "models": "models",
    "tasks": "tasks",
    "cancel": "cancel [id]",
    "resume": "resume <task_id>",
}


def _model_line(model: Model) -> str:
    """A model as ``%lmsp models`` lists it: id, status, context window, kind (``chat``, or
    ``base``: it continues the text as written) and capabilities."""
    own = (model.extensions or {}).get(EXTENSION_KEY)
    kind = own.kind if own is not None else None
    fields = [model.id, model.status, str(model.context_length), kind]
    return " ".join(["  ".join(field for field in fields if field), *model.capabilities])


def _when(timestamp: int) -> str:
    return datetime.datetime.fromtimestamp(timestamp).isoformat(sep=" ", timespec="seconds")
