/**
 * Which answers go back into a notebook that opens without them (a reload before saving, a
 * new tab, another browser): the plan, from the notebook's tasks and cells, with no DOM.
 *
 * A kernel records in each ask's tasks where it came from (task `metadata`: `notebook`,
 * `cell`, `source_hash`, `kernel`, `ask`). Per cell only the newest ask counts, and it is
 * restored only into a cell that still has the source it ran, that was not cleared on
 * purpose, and whose outputs are nothing or older answers of that same cell.
 */
import {
  isRunning,
  type IAnswerState,
  type AnswerStatus,
  type ILmspTask,
  type IResponse,
  type IToolCallState
} from '../protocol/types';

/** What the plan needs to know of one output of a cell. */
export interface IOutputSummary {
  /** The ask an LMSP answer output shows; null for any other output. */
  askId: string | null;
}

/** What the plan needs to know of one code cell. */
export interface ICellSummary {
  id: string;
  source: string;
  outputs: IOutputSummary[];
  /** The ask whose answer was cleared from this cell on purpose, as saved in its metadata. */
  dismissed: string | null;
}

/** One answer to put back: the cell, and the output's state and text. */
export interface IRestoration {
  cellId: string;
  state: IAnswerState;
  text: string;
}

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK = 0xffffffffffffffffn;

/** FNV-1a (64 bit) of the UTF-8 source as 16 hex digits: the kernel records the same. */
export function sourceHash(source: string): string {
  let hash = FNV_OFFSET;
  for (const byte of new TextEncoder().encode(source)) {
    hash = ((hash ^ BigInt(byte)) * FNV_PRIME) & MASK;
  }
  return hash.toString(16).padStart(16, '0');
}

/** The text of a response's messages. */
function messageText(response: IResponse): string {
  return response.output
    .flatMap(item => (item.type === 'message' ? item.content.map(part => part.text) : []))
    .join('');
}

/** The ask a task belongs to: its `ask` metadata, else the task alone. */
function askOf(task: ILmspTask): string {
  return task.metadata?.ask ?? task.id;
}

/** The answers to restore. `tasks` are the notebook's tasks, newest first (the listing). */
export function planRestorations(
  tasks: readonly ILmspTask[],
  cells: readonly ICellSummary[],
  dismissed: ReadonlySet<string>
): IRestoration[] {
  const byCell = new Map<string, ILmspTask[]>();
  for (const task of tasks) {
    const cell = task.metadata?.cell;
    if (cell) {
      byCell.set(cell, [...(byCell.get(cell) ?? []), task]);
    }
  }
  const plan: IRestoration[] = [];
  for (const cell of cells) {
    const cellTasks = byCell.get(cell.id);
    if (!cellTasks) {
      continue;
    }
    const newest = askOf(cellTasks[0]);
    const rounds = cellTasks.filter(task => askOf(task) === newest).reverse();
    const olderAsks = new Set(cellTasks.map(askOf).filter(ask => ask !== newest));
    const replaceable = cell.outputs.every(
      output => output.askId !== null && olderAsks.has(output.askId)
    );
    if (
      rounds[0].metadata?.source_hash === sourceHash(cell.source) &&
      !dismissed.has(newest) &&
      cell.dismissed !== newest &&
      replaceable
    ) {
      plan.push(restoration(cell.id, newest, rounds));
    }
  }
  return plan;
}

/** The calls a response ended with, by the id their decision goes by, each pending: function
 * calls and MCP calls waiting for approval. */
function pendingCalls(response: IResponse): [string, IToolCallState][] {
  return response.output.flatMap((item): [string, IToolCallState][] => {
    const pending = { decision: 'pending' as const, output: null };
    if (item.type === 'function_call') {
      return [[item.call_id, { name: item.name, arguments: item.arguments, ...pending }]];
    }
    if (item.type === 'mcp_approval_request') {
      const call = { name: item.name, arguments: item.arguments, server_label: item.server_label };
      return [[item.id, { ...call, ...pending }]];
    }
    return [];
  });
}

/**
 * The output of an ask from its tasks (oldest first): live if the last one still runs. An ask
 * whose last round completed with function calls or MCP approval requests, and has no round
 * after it, waits on its kernel for them: it comes back waiting for a decision (`requires_action`), each call
 * `pending` with its Approve and Deny, which the kernel takes if it still has the ask (a call
 * the kernel runs or has decided on meanwhile ignores the click).
 */
function restoration(cellId: string, askId: string, rounds: ILmspTask[]): IRestoration {
  const last = rounds[rounds.length - 1];
  const result = last.result;
  const running = isRunning(last);
  const calls = !running && result?.status === 'completed' ? pendingCalls(result) : [];
  const status: AnswerStatus = running
    ? 'in_progress'
    : calls.length > 0
      ? 'requires_action'
      : (result?.status ?? last.status);
  const toolCalls = Object.fromEntries(calls);
  const state: IAnswerState = {
    version: 1,
    ask_id: askId,
    kernel_id: last.metadata?.kernel ?? null,
    model: rounds.find(task => task.result)?.result?.model ?? '',
    status,
    rounds: rounds.map(task => ({ task_id: task.id, response: task.result ?? null })),
    tool_calls: toolCalls,
    error: running ? null : (last.error ?? null)
  };
  const text = [result ? messageText(result) : '', `[${status}] ${last.id}`]
    .filter(Boolean)
    .join('\n');
  return { cellId, state, text };
}

/** Asks cleared from a cell on purpose in this browser, kept for as long as tasks are. */
export class DismissedAsks {
  static readonly KEY = 'lmsp-jupyter:dismissed-asks';
  static readonly KEEP_SECONDS = 2 * 24 * 3600;

  constructor(
    private readonly _storage: Pick<Storage, 'getItem' | 'setItem'> | null,
    private readonly _now: () => number = () => Date.now() / 1000
  ) {}

  /** The dismissed ask ids. */
  all(): Set<string> {
    return new Set(Object.keys(this._read()));
  }

  /** Remember that `askId`'s answer was cleared; forget entries older than tasks live. */
  add(askId: string): void {
    const now = this._now();
    const kept = Object.entries(this._read()).filter(
      ([, at]) => now - at < DismissedAsks.KEEP_SECONDS
    );
    const entries = Object.fromEntries([...kept, [askId, now]]);
    try {
      this._storage?.setItem(DismissedAsks.KEY, JSON.stringify(entries));
    } catch {
      // Storage full or refused: the cell's metadata still says it, once saved.
    }
  }

  private _read(): Record<string, number> {
    try {
      const value = JSON.parse(this._storage?.getItem(DismissedAsks.KEY) ?? '{}');
      return typeof value === 'object' && value !== null ? value : {};
    } catch {
      return {};
    }
  }
}
