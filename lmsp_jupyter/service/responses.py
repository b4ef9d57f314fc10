"""Responses: a request becomes ordered, numbered LMSP events and a final response object.

A direct stream, a synchronous reply and a task all run ``ResponseService.events``. The run is
:mod:`.run`; stored responses and the conversations they continue are :mod:`.history`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import replace
from typing import Literal

from ..engine.backend import GenerationBackend
from ..engine.catalog import ModelEntry
from ..engine.generation import (
    CancelToken,
    ChatMessage,
    EngineError,
    GenerationDone,
    GrammarError,
    Prompt,
    ReasoningDelta,
    SamplingParams,
    TextDelta,
    ToolCallDelta,
)
from ..engine.templates import THINK_OPEN, ChatTemplateError
from ..protocol.errors import LmspError
from ..protocol.events import (
    EventData,
    ResponseCancelled,
    ResponseCompleted,
    ResponseCreated,
    ResponseEvent,
    ResponseFailed,
    ResponseIncomplete,
    ResponseInProgress,
)
from ..protocol.items import (
    InputItem,
    McpApprovalResponse,
    OutputFunctionCall,
    OutputItem,
    as_input_item,
)
from ..protocol.models import EXTENSION_KEY, ModelCapability
from ..protocol.prediction import UsageExtension, speculation_of
from ..protocol.requests import JsonSchemaFormat, ResponseRequest, keep_alive_extension
from ..protocol.responses import (
    IncompleteDetails,
    InputTokensDetails,
    OutputTokensDetails,
    Response,
    Usage,
)
from .conversation import chat_messages
from .decoding import DecodingPlan, breach, plan
from .engine_errors import engine_problem
from .history import ResponseHistory
from .logprobs import wire_logprobs
from .mcp.offer import MAX_ROUNDS, McpEvents, McpOffer, opening_events
from .mcp.servers import McpServers
from .models import ModelDirectory
from .output import ContentMode, OutputBuilder
from .queue import ModelQueue, Ticket
from .run import OWNER, ResponseRun
from .store.records import ResponseRecords, UsageRecords

__all__ = [
    "OWNER",
    "ResponseRun",
    "ResponseService",
    "with_instructions",
]

log = logging.getLogger(__name__)

_INCOMPLETE_REASONS = {"max_tokens": "max_output_tokens", "context_length": "context_length"}


class ResponseService:
    """Validates requests against models and runs them on the engine, in each model's line."""

    def __init__(
        self,
        models: ModelDirectory,
        engine: GenerationBackend,
        records: ResponseRecords | None = None,
        *,
        max_queued: int = 64,
        usage: UsageRecords | None = None,
        mcp: McpServers | None = None,
    ) -> None:
        self.models = models
        self.engine = engine
        self.records = records
        #: Where each owner's token usage is added up (``None``: it is not).
        self.usage = usage
        self.history = ResponseHistory(records)
        self.queue = ModelQueue(max_queued)
        #: The MCP servers a request's ``mcp`` tools name (``None``: none are run here).
        self.mcp = mcp

    def owner(self, response_id: str) -> str | None:
        """Whose stored response (or task's response) ``response_id`` is, for an admin reaching
        it; ``None``: nobody's, or nothing is stored."""
        return None if self.records is None else self.records.owner(response_id)

    async def start(self, request: ResponseRequest, owner: str = OWNER) -> ResponseRun:
        """Check the request against its model and render its prompt, before any generation
        (the servers of its MCP tools are listed now: the prompt offers their tools)."""
        entry, prompt, context, decoding, offer = await self._render(request, owner)
        return await self._run(request, entry, prompt, owner, context, decoding, mcp=offer)

    async def count(self, request: ResponseRequest, owner: str = OWNER) -> int:
        """The tokens of the prompt ``request`` renders, generating nothing (Anthropic's
        ``count_tokens``); whether it fits the model's window is not checked."""
        _, prompt, _, _, _ = await self._render(request, owner)
        if prompt.bound is None or prompt.counter is None:
            return prompt.length
        try:
            return (await prompt.counter())[0]
        except EngineError as exc:
            raise engine_problem(exc) from None

    async def _render(
        self, request: ResponseRequest, owner: str
    ) -> tuple[ModelEntry, Prompt, list[InputItem], DecodingPlan, McpOffer | None]:
        """The request's model, prompt, conversation, decoding and MCP tools, checked against
        its model."""
        entry = self.models.entry(request.model)
        self._check_capabilities(request, entry)
        history = self.history
        context = [*history.previous(request, owner), *history.resolved(request.input, owner)]
        offer = await self._offer(request, context)
        decoding = plan(offer.expanded if offer is not None else request)
        messages = with_instructions(chat_messages(context), request.instructions)
        try:
            prompt = await self.engine.render(entry, messages, decoding.tools, decoding.constraint)
        except ChatTemplateError as exc:
            raise LmspError("invalid_request", str(exc), param="input") from None
        except GrammarError as exc:
            raise LmspError("invalid_request", str(exc), param=decoding.constraint_param) from None
        except EngineError as exc:
            raise engine_problem(exc) from None
        return entry, prompt, context, decoding, offer

    async def _offer(self, request: ResponseRequest, context: list[InputItem]) -> McpOffer | None:
        """The MCP side of ``request`` (11.6), if it has one."""
        answers = any(isinstance(item, McpApprovalResponse) for item in request.input)
        if not request.mcp_tools() and not answers:
            return None
        if self.mcp is None:
            raise LmspError("invalid_request", "this service runs no MCP servers", param="tools")
        return await McpOffer.prepare(self.mcp, request, context)

    async def start_text(
        self,
        request: ResponseRequest,
        text: str,
        suffix: str | None = None,
        owner: str = OWNER,
        *,
        priority: bool = False,
    ) -> ResponseRun:
        """Like :meth:`start`, for a raw prompt: ``text`` continued as it is, through no chat
        template (OpenAI's Completions); with a ``suffix``, the gap between them filled in where
        the model can (its ``fim`` capability), else ``text`` alone is continued. ``request``
        says the model and the sampling; its input is not read. A ``priority`` run goes before
        every other one waiting for its model (completions as the user types)."""
        entry = self.models.entry(request.model)
        try:
            prompt = await self.engine.render_text(entry, text, suffix)
        except EngineError as exc:
            raise engine_problem(exc) from None
        return await self._run(request, entry, prompt, owner, [], plan(request), priority)

    async def _run(
        self,
        request: ResponseRequest,
        entry: ModelEntry,
        prompt: Prompt,
        owner: str,
        context: list[InputItem],
        decoding: DecodingPlan,
        priority: bool = False,
        mcp: McpOffer | None = None,
    ) -> ResponseRun:
        """The run of a rendered prompt, once it fits its window and its model and line have
        room for it."""
        await self._check_window(request, entry, prompt)
        keep_alive = keep_alive_extension(request.extensions)
        speculation = speculation_of(request.extensions)
        self.models.manager.check(entry)
        self.queue.check()
        return ResponseRun(
            request=request,
            entry=entry,
            prompt=prompt,
            owner=owner,
            context=context,
            plan=decoding,
            keep_alive=keep_alive,
            priority=priority,
            speculation=speculation,
            mcp=mcp,
        )

    async def _check_window(
        self, request: ResponseRequest, entry: ModelEntry, prompt: Prompt
    ) -> None:
        """Refuse a request whose prompt and output do not fit the context window.

        A prompt rendered elsewhere (a remote server) comes with an upper bound of its tokens;
        only when that bound does not fit is the server asked to count them.
        """
        window = self.engine.context_length(entry)
        output = request.max_output_tokens or 1
        tokens, exact = prompt.length, prompt.bound is None
        if tokens + output > window and prompt.counter is not None:
            try:
                tokens, exact = await prompt.counter()
            except EngineError as exc:
                raise engine_problem(exc) from None
        if tokens + output > window:
            counted = f"{tokens} prompt tokens" if exact else f"about {tokens} prompt tokens"
            raise LmspError(
                "context_length_exceeded",
                f"{counted} + {output} output tokens do not fit the context window of "
                f"{window} tokens",
                param="max_output_tokens" if request.max_output_tokens else "input",
            )

    def stored(self, response_id: str, owner: str) -> Response:
        """A response kept with ``store: true``; unknown or another owner's →
        ``response_not_found``."""
        return self.history.stored(response_id, owner)

    def _check_capabilities(self, request: ResponseRequest, entry: ModelEntry) -> None:
        needs: list[tuple[ModelCapability, str, bool]] = [
            (
                "structured_output",
                "response_format",
                isinstance(request.response_format, JsonSchemaFormat),
            ),
            ("tools", "tools", bool(request.tools)),
            ("conversations", "previous_response_id", request.previous_response_id is not None),
        ]
        capabilities = self.models.capabilities(entry)
        for capability, param, needed in needs:
            if needed and capability not in capabilities:
                raise LmspError(
                    "unsupported_capability",
                    f"model {entry.id!r} has no {capability!r} capability",
                    param=param,
                )

    async def events(
        self,
        run: ResponseRun,
        cancel: CancelToken | None = None,
        started: Callable[[], None] | None = None,
    ) -> AsyncGenerator[ResponseEvent, None]:
        """Generate ``run`` once it holds one of its model's slots (``started`` is called
        then), yielding its events numbered from 1; exactly one is final.

        ``cancel`` stops the generation; without one, only closing the iterator does.

        While it waits in line its model counts as in use. With ``store: true`` the response
        is kept before its final event goes out; if it cannot be kept, the final event is
        ``response.failed`` instead. The model is loaded, if it must be, before the first
        event; one that cannot be fails the response.
        """
        ticket = self.join(run)
        loaded = False
        try:
            async with self.models.manager.use(run.entry, run.keep_alive):
                loaded = True
                await ticket.wait()
                if started is not None:
                    started()
                async for event in self._generate(run, cancel or CancelToken()):
                    if event.is_final:
                        self._count(run)
                    yield self._kept(run, event) if event.is_final else event
        except (LmspError, EngineError) as exc:
            if loaded:
                raise
            run.status = "failed"
            run.error = exc if isinstance(exc, LmspError) else engine_problem(exc)
            created = ResponseCreated(response_id=run.id, response=run.response())
            yield ResponseEvent(id=1, data=created)
            failed = ResponseFailed(
                response_id=run.id, error=run.error.to_problem(), response=run.response()
            )
            yield self._kept(run, ResponseEvent(id=2, data=failed))
        finally:
            ticket.leave()

    def join(self, run: ResponseRun) -> Ticket:
        """Put ``run`` in its model's line (once): a slot now, or a place in line."""
        if run.ticket is None:
            run.ticket = self.queue.join(
                run.entry.id, self.engine.parallel(run.entry), priority=run.priority
            )
        return run.ticket

    def _count(self, run: ResponseRun) -> None:
        """Add ``run``'s tokens to its owner's usage (a failure is logged, not the run's)."""
        if self.usage is None or run.usage is None:
            return
        try:
            self.usage.add(run.owner, run.usage.input_tokens, run.usage.output_tokens)
        except Exception:
            log.exception("the usage of response %s could not be counted", run.id)

    def _kept(self, run: ResponseRun, final: ResponseEvent) -> ResponseEvent:
        """Keep ``run`` (``store: true``) before its ``final`` event; failing that, the final
        event is ``response.failed``."""
        if not run.request.store or self.records is None:
            return final
        try:
            self.history.keep(run)
        except Exception:
            log.exception("response %s could not be stored", run.id)
            run.status, run.error = "failed", _internal("could not be stored")
            problem = run.error.to_problem()
            return ResponseEvent(
                final.id, ResponseFailed(response_id=run.id, error=problem, response=run.response())
            )
        return final

    async def _generate(
        self, run: ResponseRun, cancel: CancelToken
    ) -> AsyncIterator[ResponseEvent]:
        sequence = itertools.count(1)

        def event(data: EventData) -> ResponseEvent:
            return ResponseEvent(id=next(sequence), data=data)

        yield event(ResponseCreated(response_id=run.id, response=run.response()))
        yield event(ResponseInProgress(response_id=run.id, response=run.response()))
        items: list[OutputItem] = []
        run.output = items  # the response as it stands shows the items so far
        offer, decoding = run.mcp, run.plan
        prompt: Prompt | None = run.prompt
        if offer is not None:  # its listings, then the calls the user approved
            async for data in opening_events(offer, run.id, items):
                yield event(data)
            if offer.approved:
                prompt = await self._again(run, decoding)
        done: GenerationDone | None = None
        reasoning_tokens = 0
        while prompt is not None:
            output = OutputBuilder(
                run.id,
                decoding.mode,
                tools=decoding.callable_tools,
                reasoning=self.engine.thinks(run.entry) and not prompt.raw,
                thinking_open=prompt.text.rstrip().endswith(THINK_OPEN),
                max_calls=1 if run.request.parallel_tool_calls is False else None,
                logprobs=run.request.logprobs() is not None,
                items=items,
            )
            calls = McpEvents(offer, run.id, items) if offer is not None else None
            spent = done
            done = None
            async for piece in self._round(run, prompt, decoding, output, cancel, spent):
                if isinstance(piece, GenerationDone):
                    done = _added(spent, piece)
                    continue
                async for translated in _through(calls, piece):
                    yield event(translated)
            reasoning_tokens += output.reasoning_tokens
            prompt = None
            if offer is not None and calls is not None and _continues(calls, done, items):
                offer.rounds += 1
                decoding = plan(offer.after_calls, last=offer.rounds >= MAX_ROUNDS)
                prompt = await self._again(run, decoding)
                if prompt is None:
                    done = None
        run.output = list(items)
        if done is not None:
            run.usage = Usage(
                input_tokens=done.prompt_tokens,
                output_tokens=done.output_tokens,
                total_tokens=done.prompt_tokens + done.output_tokens,
                input_tokens_details=InputTokensDetails(cached_tokens=done.cached_tokens),
                output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning_tokens),
                extensions=_draft_usage(done, predicted=run.speculation.prediction is not None),
            )
            if done.reason == "stop":
                run.error = breach(run.plan, output)
        if run.error is not None:
            run.status = "failed"
            problem = run.error.to_problem()
            yield event(ResponseFailed(response_id=run.id, error=problem, response=run.response()))
            return
        assert done is not None
        yield event(self._final(run, done))

    async def _round(
        self,
        run: ResponseRun,
        prompt: Prompt,
        decoding: DecodingPlan,
        output: OutputBuilder,
        cancel: CancelToken,
        spent: GenerationDone | None,
    ) -> AsyncIterator[EventData | GenerationDone]:
        """One generation of the model: its items' events, then how it ended (nothing when it
        failed: ``run.error`` says why)."""
        prediction = run.speculation.prediction
        budget = run.request.max_output_tokens or self.engine.context_length(run.entry)
        params = SamplingParams(
            max_tokens=budget - (spent.output_tokens if spent is not None else 0),
            temperature=run.request.temperature,
            top_p=run.request.top_p,
            top_k=run.request.top_k,
            min_p=run.request.min_p,
            seed=run.request.seed,
            stop=run.request.stop_sequences(),
            schema=decoding.constraint,
            frequency_penalty=run.request.frequency_penalty or 0.0,
            presence_penalty=run.request.presence_penalty or 0.0,
            top_logprobs=run.request.logprobs(),
            forced_tools=tuple(tool.name for tool in decoding.callable_tools)
            if decoding.mode is ContentMode.FORCED_CALL
            else (),
            prediction=prediction.text() if prediction is not None else None,
            speculation=run.speculation.speculation,
        )
        done: GenerationDone | None = None
        pending: list[EventData] = []
        try:
            async for generated in self.engine.generate(run.entry, prompt, params, cancel):
                if isinstance(generated, TextDelta):
                    pending = output.feed(generated.text, wire_logprobs(generated.logprobs))
                    for data in pending:
                        yield data
                elif isinstance(generated, ReasoningDelta):
                    for data in output.feed_reasoning(generated.text):
                        yield data
                elif isinstance(generated, ToolCallDelta):
                    for data in output.feed_call(
                        generated.index, generated.name, generated.arguments
                    ):
                        yield data
                else:
                    done = generated
            pending = output.finish(incomplete=done.reason != "stop") if done is not None else []
        except EngineError as exc:
            run.error, done = engine_problem(exc), None
        except Exception:  # a bug must not leave the stream without its final event
            log.exception("response %s failed", run.id)
            run.error, done = _internal("failed"), None
        if done is None:  # failed: the items already open end as they stand
            if run.error is None:
                run.error = LmspError("generation_failed", "the engine ended without a result")
            try:
                pending = output.abort()
            except Exception:  # the items cannot be closed either: only the final event goes
                log.exception("response %s: its open items cannot be closed", run.id)
                pending = []
        for data in pending:
            yield data
        if done is not None:
            yield done

    async def _again(self, run: ResponseRun, decoding: DecodingPlan) -> Prompt | None:
        """The prompt of the model's next round: the conversation with the response's items
        so far (MCP calls and their outputs); ``None`` when it cannot be rendered
        (``run.error`` says why)."""
        context = [*run.context, *map(as_input_item, run.output)]
        messages = with_instructions(chat_messages(context), run.request.instructions)
        try:
            return await self.engine.render(
                run.entry, messages, decoding.tools, decoding.constraint
            )
        except (ChatTemplateError, GrammarError) as exc:
            run.error = LmspError("generation_failed", str(exc))
        except EngineError as exc:
            run.error = engine_problem(exc)
        return None

    @staticmethod
    def _final(run: ResponseRun, done: GenerationDone) -> EventData:
        assert run.usage is not None
        if done.reason == "cancelled":
            run.status = "cancelled"
            return ResponseCancelled(response_id=run.id, response=run.response())
        if done.reason == "stop":
            run.status = "completed"
            return ResponseCompleted(response_id=run.id, usage=run.usage, response=run.response())
        run.status = "incomplete"
        run.incomplete_details = IncompleteDetails(reason=_INCOMPLETE_REASONS[done.reason])
        return ResponseIncomplete(
            response_id=run.id,
            incomplete_details=run.incomplete_details,
            usage=run.usage,
            response=run.response(),
        )

    async def complete(self, run: ResponseRun) -> Response:
        """Generate ``run`` to the end and return its final response; failure raises."""
        async for _ in self.events(run):
            pass
        if run.error is not None:
            raise run.error
        return run.response()


async def _through(calls: McpEvents | None, data: EventData) -> AsyncIterator[EventData]:
    """``data`` as the response shows it: a call of an MCP tool as its MCP item."""
    if calls is None:
        yield data
        return
    async for translated in calls.translate(data):
        yield translated


def _continues(calls: McpEvents, done: GenerationDone | None, items: list[OutputItem]) -> bool:
    """Whether the model goes on after a round: it called MCP tools that ran, and nothing
    waits (for approval, or for the client's function outputs)."""
    if done is None:
        return False
    waits_for_client = any(isinstance(item, OutputFunctionCall) for item in items)
    return calls.ran > 0 and not calls.waiting and not waits_for_client and done.reason == "stop"


def _added(spent: GenerationDone | None, done: GenerationDone) -> GenerationDone:
    """``done`` with the tokens of the rounds before it (``spent``) added."""
    if spent is None:
        return done
    return replace(
        done,
        prompt_tokens=spent.prompt_tokens + done.prompt_tokens,
        output_tokens=spent.output_tokens + done.output_tokens,
        cached_tokens=spent.cached_tokens + done.cached_tokens,
        accepted_draft_tokens=spent.accepted_draft_tokens + done.accepted_draft_tokens,
        accepted_prediction_tokens=spent.accepted_prediction_tokens
        + done.accepted_prediction_tokens,
        rejected_prediction_tokens=spent.rejected_prediction_tokens
        + done.rejected_prediction_tokens,
    )


def _draft_usage(
    done: GenerationDone, predicted: bool
) -> dict[Literal["x-lmsp-jupyter"], UsageExtension] | None:
    """The usage extension of a generation that verified drafts or was given a prediction."""
    if not (predicted or done.accepted_draft_tokens):
        return None
    return {
        EXTENSION_KEY: UsageExtension(
            accepted_draft_tokens=done.accepted_draft_tokens,
            accepted_prediction_tokens=done.accepted_prediction_tokens,
            rejected_prediction_tokens=done.rejected_prediction_tokens,
        )
    }


def _internal(what: str) -> LmspError:
    """The error of a response that failed on the service's side (the log has the cause)."""
    return LmspError("internal_error", f"the response {what}; see the server log")


def with_instructions(messages: list[ChatMessage], instructions: str | None) -> list[ChatMessage]:
    """``instructions`` as the system message before the conversation (11.1).

    Templates take one system message, first: instructions join one that is already there.
    """
    if not instructions:
        return messages
    if messages and messages[0].role == "system":
        first = messages[0]
        return [ChatMessage("system", f"{instructions}\n\n{first.content}"), *messages[1:]]
    return [ChatMessage("system", instructions), *messages]
