/**
 * A pure reducer from LMSP events to the view of one round (one task's response).
 */
import { outputRate } from './rates';
import {
  OUTPUT_ITEM_TYPES,
  type ILogprob,
  type OutputItem,
  type IProblem,
  type IResponse,
  type ResponseStatus,
  type ITaskEvent,
  type IUsage
} from '../protocol/types';

/** One output item as far as it has arrived. */
export interface IItemView {
  readonly id: string;
  readonly type: OutputItem['type'];
  readonly outputIndex: number;
  /** Message text, reasoning summary, a call's arguments, or the tools an MCP server lists. */
  readonly text: string;
  readonly done: boolean;
  readonly name?: string;
  /** The id its decision goes by: a function call's `call_id`, an MCP approval request's `id`. */
  readonly callId?: string;
  /** The MCP server of an MCP item. */
  readonly serverLabel?: string;
  /** An MCP call's output, or its error, as the service ran it. */
  readonly output?: string | null;
  readonly error?: string | null;
  /** A message's token logprobs, when the request asked for them. */
  readonly logprobs?: readonly ILogprob[];
}

/** When deltas arrived, to tell tokens per second; times in ms of the host's clock. */
export interface IRoundTiming {
  /** Arrival of the first batch applied; replayed events all come in it. */
  readonly firstBatchAt: number;
  readonly deltasInFirstBatch: number;
  readonly lastAt: number;
}

/** One round: a task's response, live or finished. */
export interface IRoundView {
  readonly taskId: string;
  readonly responseId: string | null;
  readonly status: 'queued' | ResponseStatus;
  readonly items: readonly IItemView[];
  readonly usage: IUsage | null;
  readonly incompleteReason: string | null;
  readonly error: IProblem | null;
  /** Id of the last event applied; events at or below it are ignored. */
  readonly lastEventId: number;
  /** Delta events applied: about one per generated token. */
  readonly deltas: number;
  readonly timing: IRoundTiming | null;
}

/** A round of which nothing has arrived yet. */
export function emptyRound(taskId: string): IRoundView {
  return {
    taskId,
    responseId: null,
    status: 'queued',
    items: [],
    usage: null,
    incompleteReason: null,
    error: null,
    lastEventId: 0,
    deltas: 0,
    timing: null
  };
}

/** The text of a message's content parts or of a reasoning summary's parts, joined. */
function partsText(parts: readonly { text?: string | null }[] | null | undefined): string {
  return (parts ?? []).map(part => part.text ?? '').join('');
}

/** The view of an output item delivered whole. */
export function itemView(item: OutputItem, outputIndex: number, done: boolean): IItemView {
  const shared = { id: item.id, type: item.type, outputIndex, done };
  switch (item.type) {
    case 'message': {
      const parts = item.content ?? [];
      const logprobs = parts.some(part => Array.isArray(part.logprobs))
        ? parts.flatMap(part => part.logprobs ?? [])
        : undefined;
      return { ...shared, text: partsText(parts), ...(logprobs ? { logprobs } : {}) };
    }
    case 'reasoning':
      return { ...shared, text: partsText(item.summary) };
    case 'function_call':
      return { ...shared, text: item.arguments ?? '', name: item.name, callId: item.call_id };
    case 'mcp_approval_request':
      return {
        ...shared,
        text: item.arguments ?? '',
        name: item.name,
        callId: item.id,
        serverLabel: item.server_label
      };
    case 'mcp_call':
      return {
        ...shared,
        text: item.arguments ?? '',
        name: item.name,
        serverLabel: item.server_label,
        output: item.output ?? null,
        error: errorText(item.error)
      };
    case 'mcp_list_tools':
      return {
        ...shared,
        text: (item.tools ?? []).map(tool => tool.name).join(', '),
        serverLabel: item.server_label,
        error: errorText(item.error)
      };
  }
}

/** An MCP item's error as text (a string, or an object with a message). */
function errorText(error: unknown): string | null {
  if (error === null || error === undefined) {
    return null;
  }
  if (typeof error === 'string') {
    return error;
  }
  const message = (error as { message?: unknown }).message;
  return typeof message === 'string' ? message : JSON.stringify(error);
}

function isOutputItem(value: unknown): value is OutputItem {
  const item = value as OutputItem | null;
  return (
    typeof item === 'object' &&
    item !== null &&
    typeof item.id === 'string' &&
    OUTPUT_ITEM_TYPES.has(item.type)
  );
}

/** The view of a finished round from its saved response. */
export function roundFromResponse(taskId: string, response: IResponse): IRoundView {
  return {
    ...emptyRound(taskId),
    responseId: response.id,
    status: response.status,
    items: (response.output ?? []).filter(isOutputItem).map((item, i) => itemView(item, i, true)),
    usage: response.usage ?? null,
    incompleteReason: response.incomplete_details?.reason ?? null,
    error: response.error ?? null
  };
}

function placeItem(items: readonly IItemView[], next: IItemView): IItemView[] {
  const at = items.findIndex(item => item.id === next.id);
  if (at >= 0) {
    return items.map((item, i) => (i === at ? next : item));
  }
  return [...items, next].sort((a, b) => a.outputIndex - b.outputIndex);
}

function appendText(
  items: readonly IItemView[],
  itemId: unknown,
  delta: unknown,
  logprobs: unknown
): IItemView[] | null {
  if (typeof delta !== 'string') {
    return null;
  }
  const at = items.findIndex(item => item.id === itemId);
  if (at < 0 || items[at].done) {
    return null;
  }
  return items.map((item, i) => {
    if (i !== at) {
      return item;
    }
    const next = { ...item, text: item.text + delta };
    return Array.isArray(logprobs)
      ? { ...next, logprobs: [...(item.logprobs ?? []), ...(logprobs as ILogprob[])] }
      : next;
  });
}

function usageOf(data: Record<string, unknown>): IUsage | null {
  const usage = data.usage as IUsage | undefined;
  return usage && typeof usage.output_tokens === 'number' ? usage : null;
}

function applyOne(round: IRoundView, event: ITaskEvent): IRoundView {
  const data = event.data ?? {};
  switch (event.event) {
    case 'response.created':
      return {
        ...round,
        status: 'in_progress',
        responseId: typeof data.response_id === 'string' ? data.response_id : round.responseId
      };
    case 'response.output_item.added':
    case 'response.output_item.done': {
      if (!isOutputItem(data.item)) {
        return round;
      }
      const done = event.event === 'response.output_item.done';
      const index = typeof data.output_index === 'number' ? data.output_index : round.items.length;
      return {
        ...round,
        status: round.status === 'queued' ? 'in_progress' : round.status,
        items: placeItem(round.items, itemView(data.item, index, done))
      };
    }
    case 'response.output_text.delta':
    case 'response.reasoning_summary_text.delta':
    case 'response.function_call_arguments.delta': {
      const items = appendText(round.items, data.item_id, data.delta, data.logprobs);
      return items ? { ...round, items, deltas: round.deltas + 1 } : round;
    }
    case 'response.completed':
      return { ...round, status: 'completed', usage: usageOf(data) };
    case 'response.incomplete': {
      const details = data.incomplete_details as { reason?: string } | undefined;
      return {
        ...round,
        status: 'incomplete',
        usage: usageOf(data),
        incompleteReason: details?.reason ?? null
      };
    }
    case 'response.failed':
    case 'error':
      return { ...round, status: 'failed', error: (data.error as IProblem) ?? null };
    case 'response.cancelled':
      return { ...round, status: 'cancelled' };
    default:
      return round;
  }
}

/**
 * Apply one batch of events that arrived together at `now` (ms). Events at or below
 * the round's last applied id are ignored, so re-sent events never duplicate text;
 * unknown event names are ignored as the spec requires.
 */
export function applyEvents(
  round: IRoundView,
  events: readonly ITaskEvent[],
  now: number
): IRoundView {
  let next = round;
  for (const event of events) {
    if (!Number.isInteger(event.id) || event.id <= next.lastEventId) {
      continue;
    }
    next = { ...applyOne(next, event), lastEventId: event.id };
  }
  if (next === round) {
    return round;
  }
  const timing: IRoundTiming = round.timing
    ? { ...round.timing, lastAt: now }
    : { firstBatchAt: now, deltasInFirstBatch: next.deltas, lastAt: now };
  return { ...next, timing };
}

/** Whether the round has ended (a final event was applied or it came from a response). */
export function isFinal(round: IRoundView): boolean {
  return round.status !== 'queued' && round.status !== 'in_progress';
}

/**
 * Tokens per second of a round the host watched live, or null when unknown.
 * Replayed events arrive in the first batch, so the rate counts from it; once usage is
 * known and the round was watched from its start, the exact output tokens are used.
 */
export function tokensPerSecond(round: IRoundView): number | null {
  const timing = round.timing;
  if (!timing) {
    return null;
  }
  const seconds = (timing.lastAt - timing.firstBatchAt) / 1000;
  if (seconds < 0.2) {
    return null;
  }
  const watchedFromStart = timing.deltasInFirstBatch <= 1;
  const tokens =
    round.usage && watchedFromStart
      ? round.usage.output_tokens
      : round.deltas - timing.deltasInFirstBatch;
  return outputRate(tokens, seconds);
}
