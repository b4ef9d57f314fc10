"""``Answer``: one ask's rounds of tasks, its tool loop and the user's decisions."""

from __future__ import annotations

import contextlib
import contextvars
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from ..client import LmspClientError, ProblemError
from ..protocol.events import (
    OutputItemDone,
    OutputTextDelta,
    ResponseCreated,
    ResponseEvent,
    StreamError,
)
from ..protocol.items import McpApprovalRequest, OutputFunctionCall, OutputItem, OutputMessage
from ..protocol.logprobs import LOGPROBS_INCLUDE, Logprob
from ..protocol.responses import Response
from .connection import TaskClient, problem_of
from .mcp import McpApprovals
from .rounds import RoundClock, call_output, continuation, open_approval, open_call
from .state import (
    FINAL_STATUSES,
    AnswerState,
    AnswerStatus,
    Round,
    ToolCallState,
    kernel_problem,
)
from .tools import Tool
from .view import AnswerView, Unseen

#: Tasks one ask may run: the first and the continuations of its tool loop.
MAX_ROUNDS = 8

DecisionRequest = Literal["approve", "deny"]


class Answer:
    """The handle of one ``%lmsp ask``: its text, output and response, and its controls.

    The first round runs ``request`` as a task; with ``origin`` (the notebook, cell and
    kernel it came from, see :mod:`.origin`) each round's task carries it and the ask id as
    metadata. When a round ends with function calls, each is decided by its tool's policy or
    by the user (:meth:`approve`, :meth:`deny`, widget clicks), and the outputs go back to
    the model in a new round, until it answers without calls. A round that ends with MCP
    approval requests waits the same way; the decisions go to the service, which runs the
    approved calls. ``approvals``: the MCP tools the session approved "always for this tool"
    (a decision with ``always`` adds to them). With ``show_prompt`` the state carries the
    prompt as sent, which the displays show folded.
    """

    def __init__(
        self,
        client: TaskClient,
        request: Mapping[str, Any],
        *,
        tools: Mapping[str, Tool] | None = None,
        view: Callable[[Answer], AnswerView] | None = None,
        kernel_id: str | None = None,
        origin: Mapping[str, str] | None = None,
        max_rounds: int = MAX_ROUNDS,
        show_prompt: bool = False,
        approvals: McpApprovals | None = None,
    ) -> None:
        self.ask_id = f"ask_{secrets.token_hex(12)}"
        self._client = client
        self._request = dict(request)
        if origin:  # every round's task says where the ask came from, and which ask it is
            self._request["metadata"] = {**origin, "ask": self.ask_id}
        self._tools = dict(tools or {})
        self._approvals = approvals or McpApprovals()
        self._max_rounds = max_rounds
        self._state = AnswerState(ask_id=self.ask_id, kernel_id=kernel_id, model=request["model"])
        if show_prompt:
            self._state.prompt = self.prompt
        self._lock = threading.RLock()
        self._settled = threading.Event()  # set while final or waiting for a decision
        self._events: list[ResponseEvent] = []  # of the running round
        self._deltas: list[str] = []
        self._delta_logprobs: list[Logprob] = []
        self._clock = RoundClock()
        self._items: list[OutputItem] = []
        self._awaiting: set[str] = set()  # calls of the last round without an output yet
        self._stopped = False
        self._view: AnswerView = view(self) if view else Unseen()

    # --- the handle ---------------------------------------------------------------------------

    @property
    def status(self) -> AnswerStatus:
        """``queued``, ``in_progress``, ``requires_action`` or a final status."""
        return self._state.status

    @property
    def prompt(self) -> str:
        """The prompt as sent: the user's text with the ``--context`` in front of it."""
        return "".join(
            str(item.get("content", ""))
            for item in self._request.get("input", [])
            if item.get("role") == "user"
        )

    @property
    def done(self) -> bool:
        """Whether the ask has ended."""
        return self._state.status in FINAL_STATUSES

    @property
    def task_id(self) -> str | None:
        """The task of the last round."""
        return self._state.rounds[-1].task_id if self._state.rounds else None

    @property
    def response(self) -> Response | None:
        """The final response of the last round, once it has ended."""
        return self._state.rounds[-1].response if self._state.rounds else None

    @property
    def output(self) -> list[OutputItem]:
        """The output items of the last round (those done so far while it runs)."""
        response = self.response
        return list(response.output) if response else list(self._items)

    @property
    def text(self) -> str:
        """The message text of the last round (so far, while it runs)."""
        response = self.response
        if response is None:
            return "".join(self._deltas)
        return "".join(
            part.text
            for item in response.output
            if isinstance(item, OutputMessage)
            for part in item.content
        )

    @property
    def logprobs(self) -> list[Logprob] | None:
        """The logprobs of the message text's tokens in the last round (so far, while it
        runs): each with ``token``, ``logprob``, ``bytes`` and ``top_logprobs``. ``None``
        unless the ask asked for them (``--logprobs N``)."""
        if LOGPROBS_INCLUDE not in self._request.get("include", ()):
            return None
        response = self.response
        if response is None:
            with self._lock:
                return list(self._delta_logprobs)
        return [
            entry
            for item in response.output
            if isinstance(item, OutputMessage)
            for part in item.content
            for entry in part.logprobs or []
        ]

    @property
    def state(self) -> AnswerState:
        """A copy of the state the displays show."""
        with self._lock:
            return self._state.model_copy(deep=True)

    def state_json(self) -> dict[str, Any]:
        """The state as JSON (``application/vnd.lmsp.task+json``)."""
        with self._lock:
            return self._state.model_dump(mode="json")

    def pending_calls(self) -> dict[str, ToolCallState]:
        """The calls waiting for the user's decision, by call id."""
        with self._lock:
            return {
                call_id: call.model_copy()
                for call_id, call in self._state.tool_calls.items()
                if call.decision == "pending"
            }

    def wait(self, timeout: float | None = None) -> Answer:
        """Block until the ask ends or waits for a decision; ``TimeoutError`` after ``timeout``."""
        if not self._settled.wait(timeout):
            raise TimeoutError(f"{self.ask_id} still runs after {timeout} s")
        self._view.waited()
        return self

    def approve(self, call_id: str | None = None, *, always: bool = False) -> None:
        """Run a pending call (default: every pending call) and give its output to the model.

        ``always``: an MCP call's tool is approved for the rest of the kernel session too.
        """
        for pending in [call_id] if call_id else list(self.pending_calls()):
            if pending == call_id or pending in self.pending_calls():  # not approved "always"
                self.decide(pending, "approve", always=always)

    def deny(self, call_id: str | None = None) -> None:
        """Decline a pending call (default: every pending call); the model is told so."""
        for pending in [call_id] if call_id else list(self.pending_calls()):
            self.decide(pending, "deny")

    def cancel(self) -> None:
        """Stop the ask: cancel its running task, or end it while it waits for decisions."""
        with self._lock:
            if self.done:
                return
            self._stopped = True
            waiting = self._state.status == "requires_action"
            if waiting:
                for call in self._state.tool_calls.values():
                    if call.decision == "pending":
                        call.decision = "denied"
                self._awaiting.clear()
            task_id = self.task_id
        if waiting:
            self._finish("cancelled")
        elif task_id is not None:
            try:
                self._client.cancel_task(task_id)
            except LmspClientError as exc:
                self._finish("failed", problem_of(exc))

    def decide(
        self,
        call_id: str,
        decision: DecisionRequest,
        performed: str | None = None,
        *,
        always: bool = False,
    ) -> None:
        """Approve (run) or deny one pending call; ``ValueError`` if it is not pending.

        ``performed``: what JupyterLab did for an approved notebook tool's call, its output.
        ``always`` with an approved MCP call: its tool needs no approval for the rest of the
        kernel session, and the ask's other calls of it waiting now are approved too.
        """
        with self._lock:
            call = self._state.tool_calls.get(call_id)
            if call is None or call.decision != "pending":
                raise ValueError(f"no call {call_id!r} waits for a decision")
            call.decision = "approved" if decision == "approve" else "denied"
            runs = [call_id]
            if always and decision == "approve" and call.server_label is not None:
                self._approvals.add(call.server_label, call.name)
                for other_id, other in self._state.tool_calls.items():
                    if other.decision == "pending" and other.title() == call.title():
                        other.decision = "auto"
                        runs.append(other_id)
            if not any(c.decision == "pending" for c in self._state.tool_calls.values()):
                self._state.status = "in_progress"  # nothing waits for the user any more
                self._settled.clear()
        self._view.refresh()
        for run in runs:
            self._run_call(run, performed if run == call_id else None)

    def handle_message(self, message: Mapping[str, Any]) -> None:
        """A click from a view or the ``lmsp`` comm: ``stop``, or ``decide`` a call.

        A ``decide`` from JupyterLab that approves a notebook tool's call carries what it
        did as ``output`` (:mod:`.notebook_tools`); one that approves an MCP call "always for
        this tool" carries ``always: true``.
        """
        if message.get("type") == "stop":
            self.cancel()
        elif message.get("type") == "decide" and message.get("decision") in ("approve", "deny"):
            output = message.get("output")
            performed = output if isinstance(output, str) else None
            always = message.get("always") is True
            # a second click, or a call decided elsewhere meanwhile, changes nothing
            with contextlib.suppress(ValueError):
                self.decide(
                    str(message.get("call_id")), message["decision"], performed, always=always
                )

    def events_after(self, task_id: str, after: int) -> list[ResponseEvent]:
        """The running round's events after the id ``after`` (none for another task)."""
        with self._lock:
            if task_id != self.task_id:
                return []
            return [event for event in self._events if event.id > after]

    def _ipython_display_(self) -> None:
        self._view.redisplay()

    def __repr__(self) -> str:
        return f"<Answer {self.task_id} {self.status}: {self.text!r}>"

    # --- rounds -------------------------------------------------------------------------------

    def start(self) -> Answer:
        """Run the first round; raises the client's error if the service refuses it."""
        self._begin_round(self._client.create_task(self._request).id)
        return self

    def follow(self, task_id: str) -> Answer:
        """Take an existing task as the first round (``%lmsp resume``)."""
        self._begin_round(task_id)
        return self

    def _begin_round(self, task_id: str) -> None:
        with self._lock:
            self._state.rounds.append(Round(task_id=task_id))
            self._state.status = "queued"
            self._events, self._deltas, self._items = [], [], []
            self._delta_logprobs = []
            self._clock = RoundClock()
            self._settled.clear()
        self._view.refresh()
        # in the starting cell's context, so the display's updates carry that cell as parent
        context = contextvars.copy_context()
        follow = threading.Thread(target=context.run, args=(self._guarded_follow, task_id))
        follow.daemon = True
        follow.start()

    def _guarded_follow(self, task_id: str) -> None:
        try:
            self._follow(task_id)
        except Exception as exc:  # the thread's edge: whoever waits must not wait forever
            self._finish("failed", kernel_problem("kernel_error", "Kernel error", repr(exc)))
            raise

    def _follow(self, task_id: str) -> None:
        stream_error: dict[str, Any] | None = None
        try:
            for event in self._replay(task_id):
                self._on_event(task_id, event)
                if isinstance(event.data, StreamError):
                    stream_error = event.data.error.model_dump(mode="json")
            task = self._client.get_task(task_id)
        except LmspClientError as exc:
            self._finish("failed", problem_of(exc))
            return
        if task.result is None:
            detail = f"the events of {task_id} ended while it is {task.status}"
            error = stream_error or kernel_problem("task_unfinished", "Task unfinished", detail)
            self._finish("failed", error)
        else:
            self._end_round(task.result)

    def _replay(self, task_id: str) -> Iterator[ResponseEvent]:
        try:
            yield from self._client.task_events(task_id)
        except ProblemError as exc:
            if exc.code != "event_history_expired":  # else the task's result is enough
                raise

    def _on_event(self, task_id: str, event: ResponseEvent) -> None:
        data = event.data
        with self._lock:
            self._events.append(event)
            self._clock.observe(data)
            if isinstance(data, ResponseCreated):
                self._state.status = "in_progress"
            elif isinstance(data, OutputTextDelta):
                self._deltas.append(data.delta)
                self._delta_logprobs += data.logprobs or []
            elif isinstance(data, OutputItemDone):
                self._items.append(data.item)
        self._view.event(task_id, event)

    def _end_round(self, response: Response) -> None:
        calls = {
            item.call_id: open_call(item, self._tools)
            for item in response.output
            if isinstance(item, OutputFunctionCall)
        }
        calls |= {
            item.id: open_approval(item, self._approvals)
            for item in response.output
            if isinstance(item, McpApprovalRequest)
        }
        with self._lock:
            self._state.rounds[-1].response = response
            self._state.rounds[-1].seconds = self._clock.seconds(response)
            self._state.model = response.model
        if self._stopped:
            self._finish("cancelled")
        elif response.status != "completed" or not calls:
            error = response.error.model_dump(mode="json") if response.error else None
            self._finish(response.status, error)
        elif len(self._state.rounds) >= self._max_rounds:
            detail = f"the model still called tools after {self._max_rounds} rounds"
            self._finish(
                "failed", kernel_problem("tool_round_limit", "Too many tool rounds", detail)
            )
        else:
            for call_id in self._open_calls(calls):
                self._run_call(call_id)

    def _open_calls(self, calls: dict[str, ToolCallState]) -> list[str]:
        """Record the calls, opened with their first decision; the ids that run without the
        user."""
        with self._lock:
            self._awaiting = set(calls)
            self._state.tool_calls.update(calls)
            runs = [call_id for call_id, call in calls.items() if call.decision != "pending"]
            if len(runs) < len(calls):
                self._state.status = "requires_action"
        self._view.refresh()
        with self._lock:
            if self._state.status == "requires_action":  # unless a click came meanwhile
                self._settled.set()
        return runs

    def _run_call(self, call_id: str, performed: str | None = None) -> None:
        with self._lock:
            call = self._state.tool_calls[call_id]
        output = call_output(call, self._tools, performed)
        with self._lock:
            call.output = output
            self._awaiting.discard(call_id)
            ready = not self._awaiting and not self.done
            if ready:
                self._state.status = "in_progress"
                self._settled.clear()
        self._view.refresh()
        if ready:
            self._continue()

    def _continue(self) -> None:
        with self._lock:
            request = None if self._stopped else self._continuation()
        if request is None:
            self._finish("cancelled")
            return
        try:
            self._begin_round(self._client.create_task(request).id)
        except LmspClientError as exc:
            self._finish("failed", problem_of(exc))

    def _continuation(self) -> dict[str, Any]:
        """The next round: the outputs of the last round's calls after its response."""
        last = self._state.rounds[-1].response
        assert last is not None  # a round is continued only once it has ended
        return continuation(self._request, last, self._state.tool_calls)

    def _finish(self, status: AnswerStatus, error: dict[str, Any] | None = None) -> None:
        with self._lock:
            self._state.status = status
            self._state.error = error
        try:
            self._view.refresh()
        finally:
            self._settled.set()  # after the refresh: who waited sees the final display
