"""A question may end with ``?``: the line that asks it reaches ``%lmsp`` whole.

IPython reads a line whose last token is ``?`` as a request for help on the name before it
(``%lmsp ask What is the capital of France?`` becomes ``%pinfo France``). Before that reading, a
cleanup transformer (:func:`keep_question_marks`, in ``shell.input_transformers_cleanup``) turns
a line that calls ``%lmsp`` with a prompt and ends in ``?`` into the call IPython would have
made of it without the ``?``; ``%lmsp?`` alone still asks for the magic's help.
"""

from __future__ import annotations

import re

from IPython.core.interactiveshell import InteractiveShell

#: ``%lmsp <text>?``, alone or assigned (``answer = %lmsp ...``), at any indentation.
_ASKING = re.compile(
    r"(?P<indent>[ \t]*)(?P<target>[A-Za-z_][\w.]*[ \t]*=[ \t]*)?%lmsp[ \t]+(?P<line>.*\?)[ \t]*"
)


def keep_question_marks(lines: list[str]) -> list[str]:
    """The cell's ``lines`` with each line that calls ``%lmsp`` with a prompt ending in ``?``
    made the magic's call (``get_ipython().run_line_magic``); a cell magic's cell is left as
    it is."""
    if lines and lines[0].lstrip().startswith("%%"):
        return lines
    return [_call(line) for line in lines]


def _call(line: str) -> str:
    body = line.rstrip("\r\n")
    asking = _ASKING.fullmatch(body)
    if asking is None or not asking["line"].strip("? \t"):
        return line
    target = asking["target"] or ""
    call = f"get_ipython().run_line_magic('lmsp', {asking['line']!r})"
    return f"{asking['indent']}{target}{call}{line[len(body) :]}"


def register(shell: InteractiveShell) -> None:
    """Let the lines of ``shell``'s cells ask questions that end in ``?`` (once)."""
    cleanup = shell.input_transformers_cleanup
    if keep_question_marks not in cleanup:
        cleanup.append(keep_question_marks)


def unregister(shell: InteractiveShell) -> None:
    """Leave ``?`` to IPython again in ``shell``."""
    cleanup = shell.input_transformers_cleanup
    while keep_question_marks in cleanup:
        cleanup.remove(keep_question_marks)
