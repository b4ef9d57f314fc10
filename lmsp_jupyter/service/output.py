"""From generated text to output items: reasoning, message text, function calls, with events."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from enum import Enum
from typing import Any

from ..engine.templates import THINK_CLOSE, THINK_OPEN
from ..protocol.events import (
    ContentPartAdded,
    ContentPartDone,
    EventData,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    OutputTextDone,
    ReasoningSummaryPartAdded,
    ReasoningSummaryPartDone,
    ReasoningSummaryTextDelta,
    ReasoningSummaryTextDone,
)
from ..protocol.ids import new_id
from ..protocol.items import (
    ItemStatus,
    OutputFunctionCall,
    OutputItem,
    OutputMessage,
    OutputReasoning,
    OutputText,
    SummaryText,
)
from ..protocol.logprobs import Logprob
from ..protocol.requests import FunctionTool
from .toolcalls import CALL_MARKERS, parse_calls

_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
_CALL_TAIL = re.compile(r"\s*\}\s*$")


class ContentMode(Enum):
    """What the answer (outside reasoning) is."""

    TEXT = "text"  # a message
    FORCED_CALL = "forced_call"  # a grammar-constrained {"name", "arguments"} object
    AUTO = "auto"  # a message, or calls in a native format


class OutputBuilder:
    """Consumes generated text; produces the events of its output items, in order."""

    def __init__(
        self,
        response_id: str,
        mode: ContentMode,
        *,
        tools: Sequence[FunctionTool] = (),
        reasoning: bool = False,
        thinking_open: bool = False,
        max_calls: int | None = None,
        logprobs: bool = False,
        items: list[OutputItem] | None = None,
    ) -> None:
        self.response_id = response_id
        self.mode = mode
        self.tools = tools
        #: At most this many native calls become items (``parallel_tool_calls: false`` → 1).
        self.max_calls = max_calls
        #: The response's items: those before this round's (``items``), then its own.
        self.items: list[OutputItem] = [] if items is None else items
        self._first = len(self.items)
        #: Tokens fed (one ``feed`` each) that went to reasoning, its tags included.
        self.reasoning_tokens = 0
        self._think = _ThinkSplitter(enabled=reasoning, open_at_start=thinking_open)
        self._reasoning: list[str] | None = None
        self._text: list[str] | None = None
        self._raw = ""
        self._call: OutputFunctionCall | None = None
        self._reasoning_index = self._text_index = self._call_index = 0
        self._final_status: ItemStatus = "completed"
        self._sent_arguments = 0
        self._auto_decided = mode is not ContentMode.AUTO
        self._native: dict[int, tuple[int, OutputFunctionCall, list[str]]] = {}
        self._events: list[EventData] = []
        #: Logprobs of the message text (``None``: not asked for), and of tokens fed whose
        #: text has not reached an item yet.
        self._logprobs: list[Logprob] | None = [] if logprobs else None
        self._held_logprobs: list[Logprob] = []

    # --- feeding ------------------------------------------------------------------------

    def feed(self, text: str, logprobs: Sequence[Logprob] = ()) -> list[EventData]:
        """The events of ``text`` (one token's text, or a few tokens' with their
        ``logprobs``), generated after everything fed before."""
        self._held_logprobs += logprobs
        was_inside = self._think.inside
        pieces = self._think.feed(text)
        if all(is_reasoning for is_reasoning, _ in pieces) and (
            pieces or was_inside or self._think.inside
        ):
            self.reasoning_tokens += 1  # the think tags count as reasoning too
        for is_reasoning, piece in pieces:
            self._piece(is_reasoning, piece)
        return self._take()

    def feed_reasoning(self, text: str) -> list[EventData]:
        """The events of reasoning an engine reports apart from the text (a remote server's
        ``reasoning_content``): it goes to the open reasoning item, or opens one."""
        if text:
            if self._text is not None:
                self._close_text()
            self._reason(text)
        return self._take()

    def feed_call(self, index: int, name: str | None, arguments: str) -> list[EventData]:
        """The events of a piece of the ``index``-th call an engine reports apart from the
        text (a remote server's ``tool_calls``): the call's item opens with its name."""
        self._close_reasoning()
        if index not in self._native:
            if self.max_calls is not None and len(self._native) >= self.max_calls:
                return self._take()
            if self._text is not None:
                self._close_text()
            self._auto_decided = True
            item = OutputFunctionCall(
                id=new_id("fc"), call_id=new_id("call"), name=name or "", arguments=""
            )
            self._native[index] = (self._add(item), item, [])
        output_index, _, sent = self._native[index]
        if arguments:
            sent.append(arguments)
            self._arguments_delta(output_index, arguments)
        return self._take()

    def finish(self, *, incomplete: bool = False) -> list[EventData]:
        """Close every open item (generation ended; ``incomplete``: it was cut short)."""
        self._final_status = "incomplete" if incomplete else "completed"
        for is_reasoning, piece in self._think.flush():
            self._piece(is_reasoning, piece)
        self._close_reasoning()
        if self._native:
            if self._text is not None:
                self._close_text()
            self._close_native()
            return self._take()
        if self.mode is ContentMode.FORCED_CALL:
            self._finish_call()
        elif self.mode is ContentMode.AUTO and not self._auto_decided:
            self._finish_auto()
        elif self._text is not None or len(self.items) == self._first:
            self._close_text()
        return self._take()

    def abort(self) -> list[EventData]:
        """Close the items already open, as they stand, and start none (generation failed)."""
        self._final_status = "incomplete"
        self._close_reasoning()
        if self._text is not None:
            self._close_text()
        if self._call is not None and self.items[self._call_index].status == "in_progress":
            arguments = self._raw[: self._sent_arguments]
            self._close_call(
                self._call_index, self._call.model_copy(update={"arguments": arguments})
            )
        self._close_native()
        return self._take()

    def _close_native(self) -> None:
        """Close the calls the engine reported apart from the text that are still open."""
        for output_index, item, sent in self._native.values():
            if self.items[output_index].status == "in_progress":
                arguments = "".join(sent)
                self._close_call(output_index, item.model_copy(update={"arguments": arguments}))

    def _take(self) -> list[EventData]:
        events, self._events = self._events, []
        return events

    def _piece(self, is_reasoning: bool, piece: str) -> None:
        if is_reasoning:
            self._reason(piece)
            return
        self._close_reasoning()
        if self.mode is ContentMode.FORCED_CALL:
            self._call_text(piece)
        elif not self._auto_decided:
            self._auto_text(piece)
        else:
            self._message_text(piece)

    # --- items ----------------------------------------------------------------------------

    def _add(self, item: OutputItem) -> int:
        """Open ``item`` (status ``in_progress``); its output index."""
        item = item.model_copy(update={"status": "in_progress"})
        self.items.append(item)
        index = len(self.items) - 1
        self._events.append(
            OutputItemAdded(response_id=self.response_id, output_index=index, item=item)
        )
        return index

    def _done(self, index: int, item: OutputItem) -> None:
        item = item.model_copy(update={"status": self._final_status})
        self.items[index] = item
        self._events.append(
            OutputItemDone(response_id=self.response_id, output_index=index, item=item)
        )

    def _reason(self, piece: str) -> None:
        if self._reasoning is None:
            self._reasoning = []
            self._reasoning_index = self._add(OutputReasoning(id=new_id("rs")))
            self._events.append(
                ReasoningSummaryPartAdded(
                    **self._at(self._reasoning_index), summary_index=0, part=SummaryText(text="")
                )
            )
        self._reasoning.append(piece)
        self._held_logprobs.clear()  # logprobs are the message text's alone
        self._events.append(
            ReasoningSummaryTextDelta(
                **self._at(self._reasoning_index), summary_index=0, delta=piece
            )
        )

    def _close_reasoning(self) -> None:
        if self._reasoning is None:
            return
        index, text = self._reasoning_index, "".join(self._reasoning)
        where = self._at(index)
        self._events.append(ReasoningSummaryTextDone(**where, summary_index=0, text=text))
        part = SummaryText(text=text)
        self._events.append(ReasoningSummaryPartDone(**where, summary_index=0, part=part))
        self._done(index, OutputReasoning(id=where["item_id"], summary=[part]))
        self._reasoning = None

    def _at(self, index: int) -> dict[str, Any]:
        """Where an event of the item at ``index`` belongs."""
        return {
            "response_id": self.response_id,
            "item_id": self.items[index].id or "",
            "output_index": index,
        }

    def _open_text(self) -> None:
        self._text = []
        self._text_index = self._add(OutputMessage(id=new_id("msg")))
        part = OutputText(text="", logprobs=None if self._logprobs is None else [])
        self._events.append(
            ContentPartAdded(**self._at(self._text_index), content_index=0, part=part)
        )

    def _message_text(self, piece: str) -> None:
        if self._text is None:
            self._open_text()
        assert self._text is not None
        self._text.append(piece)
        logprobs = None
        if self._logprobs is not None:
            logprobs, self._held_logprobs = self._held_logprobs, []
            self._logprobs += logprobs
        self._events.append(
            OutputTextDelta(
                **self._at(self._text_index), content_index=0, delta=piece, logprobs=logprobs
            )
        )

    def _close_text(self) -> None:
        if self._text is None:
            self._open_text()
        assert self._text is not None
        index, text = self._text_index, "".join(self._text)
        where = self._at(index)
        part = OutputText(text=text, logprobs=self._logprobs)
        self._events.append(OutputTextDone(**where, content_index=0, text=text))
        self._events.append(ContentPartDone(**where, content_index=0, part=part))
        self._done(index, OutputMessage(id=where["item_id"], content=[part]))
        self._text = None

    @property
    def message_text(self) -> str | None:
        """The text of the answer's message, if it has one."""
        for item in self.items[self._first :]:
            if isinstance(item, OutputMessage) and item.content:
                return item.content[0].text
        return None

    def _arguments_delta(self, index: int, delta: str) -> None:
        self._events.append(FunctionCallArgumentsDelta(**self._at(index), delta=delta))

    def _close_call(self, index: int, call: OutputFunctionCall) -> None:
        self._events.append(
            FunctionCallArgumentsDone(**self._at(index), name=call.name, arguments=call.arguments)
        )
        self._done(index, call)

    # --- a forced call: {"name": ..., "arguments": ...} streamed as argument deltas --------

    def _call_text(self, piece: str) -> None:
        self._held_logprobs.clear()  # logprobs are the message text's alone
        self._raw += piece
        if self._call is None:
            head = _CALL_HEAD.match(self._raw)
            if head is None:
                return
            name = json.loads(f'"{head[1]}"')
            self._call = OutputFunctionCall(
                id=new_id("fc"), call_id=new_id("call"), name=name, arguments=""
            )
            self._call_index = self._add(self._call)
            self._raw = self._raw[head.end() :]
        if not self._sent_arguments:  # the space after "arguments": may come in a later piece
            self._raw = self._raw.lstrip()
        # The object's own closing brace must not reach the arguments: hold back "}" runs.
        safe = len(self._raw.rstrip(" \t\r\n}"))
        self._send_arguments(self._raw[:safe])

    def _send_arguments(self, arguments: str) -> None:
        if self._call is not None and len(arguments) > self._sent_arguments:
            delta = arguments[self._sent_arguments :]
            self._sent_arguments = len(arguments)
            self._arguments_delta(self._call_index, delta)

    def _finish_call(self) -> None:
        if self._call is None:
            return
        arguments = _CALL_TAIL.sub("", self._raw, count=1).rstrip()
        self._send_arguments(arguments)
        self._close_call(self._call_index, self._call.model_copy(update={"arguments": arguments}))

    # --- auto: text, unless the answer starts like a native call ---------------------------

    def _auto_text(self, piece: str) -> None:
        self._raw += piece
        start = self._raw.lstrip()
        if not start:
            return
        if any(start.startswith(marker) for marker in CALL_MARKERS):
            return  # a call, perhaps: keep it until the end
        if any(marker.startswith(start) for marker in CALL_MARKERS):
            return  # too early to tell
        self._auto_decided = True
        self._message_text(self._raw)
        self._raw = ""

    def _finish_auto(self) -> None:
        calls = parse_calls(self._raw, self.tools) if self._raw.strip() else None
        if calls is None:
            if self._raw:
                self._message_text(self._raw)
            self._close_text()
            return
        for call in calls[: self.max_calls]:
            item = OutputFunctionCall(
                id=new_id("fc"), call_id=new_id("call"), name=call.name, arguments=""
            )
            index = self._add(item)
            self._arguments_delta(index, call.arguments)
            self._close_call(index, item.model_copy(update={"arguments": call.arguments}))


class _ThinkSplitter:
    """Splits text into (is_reasoning, piece): reasoning is what stands between think tags."""

    def __init__(self, *, enabled: bool, open_at_start: bool) -> None:
        self.enabled = enabled
        self.inside = enabled and open_at_start
        self.at_start = enabled and not open_at_start
        self.after_close = False
        self._pending = ""

    def feed(self, text: str) -> list[tuple[bool, str]]:
        if not self.enabled:
            return [(False, text)] if text else []
        buffer, self._pending = self._pending + text, ""
        pieces: list[tuple[bool, str]] = []
        while buffer:
            if self.at_start:
                start = buffer.lstrip()
                if start.startswith(THINK_OPEN):
                    self.inside, self.at_start = True, False
                    buffer = start[len(THINK_OPEN) :]
                    continue
                if THINK_OPEN.startswith(start):
                    self._pending = buffer
                    break
                self.at_start = False
            if self.inside:
                end = buffer.find(THINK_CLOSE)
                if end >= 0:
                    pieces.append((True, buffer[:end]))
                    self.inside, self.after_close = False, True
                    buffer = buffer[end + len(THINK_CLOSE) :]
                    continue
                keep = _partial_suffix(buffer, THINK_CLOSE)
                pieces.append((True, buffer[: len(buffer) - keep]))
                self._pending = buffer[len(buffer) - keep :]
                break
            if self.after_close:
                buffer = buffer.lstrip("\n")
                if not buffer:
                    break
                self.after_close = False
            pieces.append((False, buffer))
            break
        return [(is_reasoning, piece) for is_reasoning, piece in pieces if piece]

    def flush(self) -> list[tuple[bool, str]]:
        pending, self._pending = self._pending, ""
        if not pending:
            return []
        return [(self.inside, pending)]


def _partial_suffix(text: str, marker: str) -> int:
    """How many characters at the end of ``text`` could begin ``marker``."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
