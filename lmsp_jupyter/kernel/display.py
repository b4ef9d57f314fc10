"""The MIME bundle of an ask: the durable state, and the text for front ends without widgets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.getipython import get_ipython
from IPython.display import display, update_display

from ..protocol.items import McpCall

if TYPE_CHECKING:
    from .answer import Answer

TASK_MIME = "application/vnd.lmsp.task+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def text_bundle(answer: Answer) -> dict[str, Any]:
    """The task state, Markdown and plain text of ``answer`` (everything but the widget)."""
    state = answer.state
    notes = [
        f"{call.title()}({call.arguments}) — {call.decision}"
        + (f": {call.output}" if call.output is not None else "")
        for call in state.tool_calls.values()
    ]
    notes += [
        f"{item.server_label}:{item.name}({item.arguments}) → "
        + (f"error: {item.error}" if item.error is not None else item.output or "")
        for round_ in state.rounds
        for item in (round_.response.output if round_.response else [])
        if isinstance(item, McpCall)
    ]
    if state.error:
        notes.append(f"{state.error.get('title')}: {state.error.get('detail')}")
    markdown = "\n\n".join([answer.text, *(f"`{note}`" for note in notes)]).strip()
    if state.prompt is not None:
        markdown += prompt_fold(state.prompt)
    plain = "\n".join([answer.text, *notes, f"[{state.status}] {answer.task_id}"]).strip()
    return {
        TASK_MIME: state.model_dump(mode="json"),
        "text/markdown": markdown,
        "text/plain": plain,
    }


def prompt_fold(prompt: str) -> str:
    """The prompt as sent, in a collapsed ``<details>`` section of Markdown."""
    fence = "````" if "```" in prompt else "```"
    return f"\n\n<details><summary>Prompt</summary>\n\n{fence}text\n{prompt}\n{fence}\n\n</details>"


def publish(bundle: dict[str, Any], display_id: str, *, update: bool = False) -> None:
    """Show ``bundle`` as the display ``display_id``, or replace what it shows."""
    if update:
        update_display(bundle, raw=True, display_id=display_id)  # type: ignore[no-untyped-call]
    else:
        display(bundle, raw=True, display_id=display_id)  # type: ignore[no-untyped-call]


def execution_count() -> int | None:
    """The number of the cell running now (``None`` outside IPython)."""
    shell = get_ipython()
    return None if shell is None else int(shell.execution_count)
