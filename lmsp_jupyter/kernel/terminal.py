"""How an ask shows in a terminal: text printed as it comes, decisions asked with ``input()``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from ..protocol.events import OutputTextDelta, ResponseEvent
from .display import execution_count, text_bundle

if TYPE_CHECKING:
    from .answer import Answer


class TerminalView:
    """Prints the answer's text as it streams, each tool call once run, and how the ask ended."""

    def __init__(self, answer: Answer, out: TextIO | None = None) -> None:
        self._answer = answer
        self._out = out or sys.stdout
        self._shown_in = execution_count()
        self._printed: set[str] = set()
        self._ended = False

    def refresh(self) -> None:
        """Print the calls that got their output, and the end of the ask."""
        state = self._answer.state
        for call_id, call in state.tool_calls.items():
            if call.output is not None and call_id not in self._printed:
                self._printed.add(call_id)
                shown = f"{call.title()}({call.arguments}) {call.decision}: {call.output}"
                self._write(f"\n[{shown}]\n")
        if self._answer.done and not self._ended:
            self._ended = True
            error = f": {state.error.get('detail')}" if state.error else ""
            ending = "" if state.status == "completed" else f"[{state.status}{error}]\n"
            self._write(f"\n{ending}")

    def event(self, task_id: str, event: ResponseEvent) -> None:
        """Print message text as it comes."""
        if isinstance(event.data, OutputTextDelta):
            self._write(event.data.delta)

    def waited(self) -> None:
        """Nothing to do: the terminal printed the answer as it came."""

    def redisplay(self) -> None:
        """Print the answer again; in the cell that just printed it, only its status line."""
        text = text_bundle(self._answer)["text/plain"]
        if execution_count() == self._shown_in:
            text = text.rpartition("\n")[2]
        self._write(f"{text}\n")

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


def run_in_terminal(answer: Answer, ask: Callable[[str], str] = input) -> Answer:
    """Block until ``answer`` ends, asking the user about each call that waits for approval.

    Ctrl-C cancels the ask.
    """
    try:
        while answer.wait().status == "requires_action":
            for call_id, call in answer.pending_calls().items():
                if call_id not in answer.pending_calls():  # approved "always" for its tool
                    continue
                always = "/a(lways)" if call.server_label is not None else ""
                reply = ask(f"\nRun {call.title()}({call.arguments})? [y/N{always}] ").strip()
                approved = reply.lower() in ("y", "yes", *(("a", "always") if always else ()))
                answer.decide(
                    call_id,
                    "approve" if approved else "deny",
                    always=bool(always) and reply.lower() in ("a", "always"),
                )
    except KeyboardInterrupt:
        answer.cancel()
        answer.wait()
    return answer
