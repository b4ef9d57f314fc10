"""The edit-a-cell request, shared with the JupyterLab command: a raw continuation a model
continues from ``After:`` to a closing fence. Its cases live in ``tests/fixtures/edit_prompt.json``;
``labextension/src/edit/prompt.ts`` builds the same text. Pure data."""

from __future__ import annotations

#: Where generation stops: the fence that closes the new source.
EDIT_STOP = ["```"]


def quoted_source(source: str) -> str:
    """The source as the prompt quotes it: without its trailing newlines."""
    return source.rstrip("\n")


def edit_prompt(instruction: str, source: str, language: str) -> str:
    """The text a model continues with the new source, after ``After:`` and an open fence."""
    return (
        f"Instruction: {instruction.strip()}\n\n"
        f"Before:\n```{language}\n{quoted_source(source)}\n```\n\n"
        f"After:\n```{language}\n"
    )


def edit_prediction(source: str) -> str:
    """The continuation expected when the edit changes little: the old source, then the fence."""
    return f"{quoted_source(source)}\n{EDIT_STOP[0]}"


def edited_source(generated: str) -> str:
    """The new source in ``generated``: the text before the closing fence, without its last
    newline (the fence is absent when generation stopped on it)."""
    text = generated.split(EDIT_STOP[0], 1)[0]
    return text.removesuffix("\n")
