"""``%lmsp edit``: the cell above rewritten by the model as an instruction says, shown as a diff.

The request is the shared edit prompt (:mod:`lmsp_jupyter.protocol.cell_edit`) sent as the user
text of an ask, stopped at the closing fence, with the old source as its predicted output. Tasks
carry Responses requests only, so a chat model gets the prompt through its chat template; a base
model gets the text as written, the prompt the JupyterLab command sends raw.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from IPython.core.interactiveshell import InteractiveShell
from IPython.display import display

from ..protocol.cell_edit import (
    EDIT_STOP,
    edit_prediction,
    edit_prompt,
    edited_source,
    quoted_source,
)
from ..protocol.models import EXTENSION_KEY
from .answer import Answer
from .context import CHARS_PER_TOKEN
from .options import AskOptions

#: Output tokens of an edit beyond the old source's estimate.
EDIT_SLACK_TOKENS = 256


def edit_request(
    options: AskOptions, source: str, default_model: Callable[[], str]
) -> dict[str, Any]:
    """The task request that edits ``source`` as ``options.prompt`` says."""
    request: dict[str, Any] = {
        "model": options.model or default_model(),
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": edit_prompt(options.prompt, source, "python"),
            }
        ],
        "stop": EDIT_STOP,
        "store": True,
        "temperature": 0 if options.temperature is None else options.temperature,
        "max_output_tokens": options.max_tokens
        or len(source) // CHARS_PER_TOKEN * 2 + EDIT_SLACK_TOKENS,
        "extensions": {
            EXTENSION_KEY: {"prediction": {"type": "content", "content": edit_prediction(source)}}
        },
    }
    if options.system is not None:
        request["instructions"] = options.system
    return request


class EditAnswer(Answer):
    """The answer of ``%lmsp edit``: also the old source and the new one."""

    def __init__(self, *args: Any, source: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The source of the cell that was edited.
        self.source = source

    @property
    def new_source(self) -> str | None:
        """The edited source, once the ask has ended (``None`` if it failed or was cancelled)."""
        if self.status not in ("completed", "incomplete"):
            return None
        return edited_source(self.text)

    def diff(self) -> str:
        """The edit as a unified diff of the old source against the new one."""
        new = self.new_source or ""
        lines = difflib.unified_diff(
            quoted_source(self.source).splitlines(),
            new.splitlines(),
            "cell above",
            "edited",
            lineterm="",
        )
        return "\n".join(lines) or "(no change)"

    def offer(self, shell: InteractiveShell) -> None:
        """Show the diff, and put the new source in the next input for the user to run."""
        if self.new_source is None:
            return
        diff = self.diff()
        bundle = {"text/markdown": f"```diff\n{diff}\n```", "text/plain": diff}
        display(bundle, raw=True)  # type: ignore[no-untyped-call]
        shell.set_next_input(self.new_source, replace=False)
