/**
 * The MIME renderer of `application/vnd.lmsp.task+json`: saved rounds from the
 * bundle, the running round followed from the browser, clicks to the server and kernel.
 */
import type { INotebookTracker } from '@jupyterlab/notebook';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import type { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { cancelTask, getTask, listTasks, sessionFetch, taskEventsUrl } from '../protocol/api';
import { TaskFollower, type FollowEnd } from '../protocol/follow';
import type { KernelMessenger } from './kernel';
import { MIME_TYPE } from './mimetype';
import { notebookHost } from './host';
import { performNotebookCall } from './tools';
import { AnswerView } from '../render';
import type { IAnswerState, IToolCallState } from '../protocol/types';

/** Ahead of the ipywidgets widget-view renderer (-10): in JupyterLab this view shows every ask. */
export const RENDERER_RANK = -20;

/** How often, and how long, a decision made in a restored answer looks for the next round. */
const NEXT_ROUND_POLL_MS = 1000;
const NEXT_ROUND_WAIT_MS = 10 * 60 * 1000;

const NOTES: Record<string, string> = {
  event_history_expired: 'The live events of this round have expired; showing what was saved.',
  task_not_found: 'This task is no longer on the server; showing what was saved.'
};

/** The output of an approved notebook tool's call when this view is in no open notebook. */
const NO_NOTEBOOK =
  'error: the answer that approved this call is not shown in an open notebook, ' +
  'so nothing was done';

/** Renders one ask; kept across update_display so the live stream goes on. */
export class TaskRenderer extends Widget implements IRenderMime.IRenderer {
  private readonly _messenger: KernelMessenger;
  private readonly _notebooks: INotebookTracker | null;
  /** Notebook tools' calls decided here: a later click (Approve again, Deny meanwhile) is
   * ignored, so a call is never performed twice nor performed and denied. */
  private readonly _decided = new Set<string>();
  private readonly _view: AnswerView;
  private readonly _followers = new Map<string, TaskFollower>();
  private _trusted = false;

  constructor(
    messenger: KernelMessenger,
    trans: TranslationBundle,
    notebooks: INotebookTracker | null = null
  ) {
    super();
    this._messenger = messenger;
    this._notebooks = notebooks;
    this.addClass('lmsp-rendered-task');
    this._view = new AnswerView(
      {
        stop: () => void this._stop(),
        decide: (callId, decision, always) => void this._decide(callId, decision, always)
      },
      { trans }
    );
    this.node.append(this._view.node);
    messenger.kernelsChanged.connect(this._updateActions, this);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const state = model.data[MIME_TYPE] as unknown as IAnswerState | undefined;
    if (!state || !Array.isArray(state.rounds)) {
      return;
    }
    this._trusted = model.trusted;
    this._view.setState(state);
    this._follow();
    this._updateActions();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._messenger.kernelsChanged.disconnect(this._updateActions, this);
    for (const follower of this._followers.values()) {
      follower.dispose();
    }
    this._followers.clear();
    super.dispose();
  }

  /** Follow every running round not followed yet; stop following saved ones. */
  private _follow(): void {
    const answer = this._view.answer;
    const running = new Set(answer.runningTaskIds());
    for (const [taskId, follower] of Array.from(this._followers)) {
      if (!running.has(taskId)) {
        follower.dispose();
        this._followers.delete(taskId);
      }
    }
    for (const taskId of running) {
      if (this._followers.has(taskId)) {
        continue;
      }
      const follower = new TaskFollower({
        url: taskEventsUrl(taskId),
        after: answer.lastEventId(taskId),
        onEvents: events => {
          this._view.setNote('');
          this._view.applyEvents(taskId, events);
        },
        onRetry: () => this._view.setNote('Connection lost; reconnecting…'),
        onEnd: end => void this._ended(taskId, end),
        fetch: sessionFetch
      });
      this._followers.set(taskId, follower);
      void follower.run();
    }
  }

  private async _ended(taskId: string, end: FollowEnd): Promise<void> {
    if (end.reason === 'final') {
      this._view.setNote('');
      return;
    }
    if (end.reason === 'unreachable') {
      this._view.setNote('The server cannot be reached; showing what was saved.');
      return;
    }
    const code = end.problem.code ?? '';
    this._view.setNote(
      NOTES[code] ?? `Cannot follow this task: ${end.problem.detail ?? end.status}.`
    );
    if (code === 'event_history_expired') {
      await this._showResult(taskId);
    }
  }

  /** After the events expired the task may still hold its result (6.4): show it. */
  private async _showResult(taskId: string): Promise<void> {
    const task = await getTask(taskId).catch(() => null);
    const state = this._view.answer.state;
    if (!task?.result || !state || this.isDisposed) {
      return;
    }
    this._view.setState({
      ...state,
      rounds: state.rounds.map(round =>
        round.task_id === taskId ? { ...round, response: task.result ?? null } : round
      )
    });
  }

  /**
   * After a decision the kernel runs the call, starts the ask's next round and updates its
   * display. An answer the restore plugin put back is not that display: it finds the next
   * round among the ask's tasks itself and follows it. It stops looking as soon as the
   * kernel's own update comes (a new state), or after a while.
   */
  private _awaitNextRound(callId: string, decision: 'approve' | 'deny'): void {
    const state = this._view.answer.state;
    if (!state) {
      return;
    }
    const known = new Set(state.rounds.map(round => round.task_id));
    const until = Date.now() + NEXT_ROUND_WAIT_MS;
    const waiting = (): boolean => !this.isDisposed && this._view.answer.state === state;
    const look = async (): Promise<void> => {
      const tasks = waiting()
        ? await listTasks({ limit: 5, metadata: { ask: state.ask_id } }).catch(() => [])
        : [];
      const next = tasks.find(task => !known.has(task.id));
      if (!waiting()) {
        return;
      }
      if (!next) {
        if (Date.now() < until) {
          window.setTimeout(() => void look(), NEXT_ROUND_POLL_MS);
        }
        return;
      }
      const call = state.tool_calls[callId];
      const decided = decision === 'approve' ? ('approved' as const) : ('denied' as const);
      this._view.setState({
        ...state,
        status: 'in_progress',
        tool_calls: call
          ? { ...state.tool_calls, [callId]: { ...call, decision: decided } }
          : state.tool_calls,
        rounds: [...state.rounds, { task_id: next.id, response: null }]
      });
      this._follow();
      this._updateActions();
    };
    window.setTimeout(() => void look(), NEXT_ROUND_POLL_MS);
  }

  /**
   * Send a decision to the kernel. Approving a notebook tool's call first performs it on
   * this view's notebook (`tools.ts`) and sends what it did as the call's output;
   * a denial changes nothing. `always` approves an MCP call's tool for the kernel session.
   */
  private async _decide(
    callId: string,
    decision: 'approve' | 'deny',
    always = false
  ): Promise<void> {
    const state = this._view.answer.state;
    const call = state?.tool_calls[callId];
    let output: string | undefined;
    if (call?.runs_in === 'notebook') {
      if (this._decided.has(callId)) {
        return;
      }
      if (decision === 'approve' && !this._messenger.isRunning(state?.kernel_id ?? null)) {
        this._updateActions(); // the kernel could not be told: nothing is done
        return;
      }
      this._decided.add(callId);
      if (decision === 'approve') {
        output = await this._performOnNotebook(call);
      }
    }
    this._send({
      type: 'decide',
      ask_id: state?.ask_id ?? '',
      call_id: callId,
      decision,
      ...(output === undefined ? {} : { output }),
      ...(always ? { always } : {})
    });
    this._awaitNextRound(callId, decision);
  }

  private _performOnNotebook(call: IToolCallState): Promise<string> {
    const host = notebookHost(this._notebooks, this.node);
    return host
      ? performNotebookCall(call.name, call.arguments, host)
      : Promise.resolve(NO_NOTEBOOK);
  }

  private _updateActions(): void {
    const state = this._view.answer.state;
    if (!this._trusted) {
      this._view.setActionsEnabled(
        false,
        'Trust this notebook to stop the answer or decide on tool calls.'
      );
    } else if (
      state &&
      !this._messenger.isRunning(state.kernel_id) &&
      this._hasPendingCall(state)
    ) {
      this._view.setActionsEnabled(
        false,
        'The kernel that asked is not running: tool calls cannot be decided.'
      );
    } else {
      this._view.setActionsEnabled(true);
    }
  }

  private _hasPendingCall(state: IAnswerState): boolean {
    return Object.values(state.tool_calls ?? {}).some(call => call.decision === 'pending');
  }

  /** Stop cancels the running task on the server, which the kernel then sees end. */
  private async _stop(): Promise<void> {
    const taskId = this._view.answer.activeTaskId();
    if (!taskId) {
      return;
    }
    try {
      await cancelTask(taskId);
    } catch (error) {
      this._view.setNote(`Stop failed: ${(error as Error).message}`);
    }
  }

  private _send(request: Parameters<KernelMessenger['send']>[1]): void {
    const kernelId = this._view.answer.state?.kernel_id;
    if (!kernelId || !this._messenger.isRunning(kernelId)) {
      this._updateActions();
      return;
    }
    try {
      this._messenger.send(kernelId, request);
    } catch (error) {
      this._view.setNote(`Could not reach the kernel: ${String(error)}`);
    }
  }
}

/** The renderer factory registered with the application's rendermime registry. */
export function taskRendererFactory(
  messenger: KernelMessenger,
  trans: TranslationBundle,
  notebooks: INotebookTracker | null = null
): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [MIME_TYPE],
    defaultRank: RENDERER_RANK,
    createRenderer: () => new TaskRenderer(messenger, trans, notebooks)
  };
}
