"""A sequence's text as it is generated, held back where a stop string may begin."""

from __future__ import annotations

import codecs


class HeldText:
    """A sequence's bytes turned into text, holding back what might begin a stop string."""

    def __init__(self, stop: tuple[str, ...]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(s for s in stop if s)
        self._held = ""

    def feed(self, data: bytes) -> tuple[str, bool]:
        """The text that may go out after ``data``, and whether a stop string ended it."""
        text = self._held + self._decoder.decode(data)
        found = [index for index in (text.find(stop) for stop in self._stop) if index >= 0]
        if found:
            self._held = ""
            return text[: min(found)], True
        keep = self._stop_prefix(text)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep], False

    def _stop_prefix(self, text: str) -> int:
        """The length of the longest end of ``text`` that a stop string starts with."""
        for length in range(min(len(text), max((len(s) for s in self._stop), default=0)), 0, -1):
            if any(stop.startswith(text[-length:]) for stop in self._stop):
                return length
        return 0

    def flush(self) -> str:
        """What is left once generation ends without a stop string."""
        text = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return text
