/**
 * The DOM of one ask, updated in place: a header (status, model, usage, rate, Stop), its
 * rounds (their items drawn by `ItemsDom`, then how each ended) and notes.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { Answer } from './answer';
import { ItemsDom, type IRoundDom } from './items';
import { formatRate } from './rates';
import type { IRoundView } from './reducer';
import {
  draftedTokens,
  type IAnswerState,
  type ITaskEvent,
  type IToolCallState
} from '../protocol/types';
import { element } from './dom';

/** What the view's buttons ask the host to do. */
export interface IAnswerActions {
  stop(): void;
  /** `always`: an MCP call's tool needs no approval for the rest of the kernel session. */
  decide(callId: string, decision: 'approve' | 'deny', always?: boolean): void;
}

/** Host hooks; tests replace the clock and the frame scheduler. */
export interface IAnswerViewOptions {
  /** The translation of the view's text; English when not given (the anywidget view). */
  trans?: Pick<TranslationBundle, '__'>;
  now?: () => number;
  requestFrame?: (callback: () => void) => void;
}

/**
 * The English text, `%1`… replaced by their arguments as `TranslationBundle.__` does: not
 * `nullTranslator`, which would bring @jupyterlab/translation's dependencies into widget.js.
 */
const ENGLISH: Pick<TranslationBundle, '__'> = {
  __: (msgid, ...args) =>
    msgid.replace(/%(\d+)/g, (match, index) => String(args[Number(index) - 1] ?? match))
};

function formatCount(value: number): string {
  return value.toLocaleString('en-US');
}

/** The view of one ask: header, rounds of items, notes; `node` is the root element. */
export class AnswerView {
  readonly node: HTMLDivElement;
  readonly answer = new Answer();

  private readonly _actions: IAnswerActions;
  private readonly _trans: Pick<TranslationBundle, '__'>;
  private readonly _now: () => number;
  private readonly _items: ItemsDom;
  private readonly _status = element('span', 'lmsp-status');
  private readonly _model = element('span', 'lmsp-model');
  private readonly _usage = element('span', 'lmsp-usage');
  private readonly _rate = element('span', 'lmsp-rate');
  private readonly _taskId = element('code', 'lmsp-task-id');
  private readonly _stop = element('button', 'lmsp-stop jp-mod-styled');
  private readonly _shade = element('button', 'lmsp-shade jp-mod-styled');
  private readonly _note = element('div', 'lmsp-note');
  private readonly _error = element('div', 'lmsp-error');
  private readonly _roundsNode = element('div', 'lmsp-rounds');
  private readonly _prompt = element('details', 'lmsp-prompt');
  private readonly _promptText = element('pre', 'lmsp-prompt-text');
  private readonly _rounds = new Map<string, IRoundDom>();
  private _stopSent = false;
  private _actionsEnabled = true;
  private _actionsNote = '';
  private _hostNote = '';

  constructor(actions: IAnswerActions, options: IAnswerViewOptions = {}) {
    this._actions = actions;
    this._trans = options.trans ?? ENGLISH;
    this._now = options.now ?? (() => performance.now());
    this._items = new ItemsDom(
      (...decision) => this._actions.decide(...decision),
      options.requestFrame ?? (callback => requestAnimationFrame(callback))
    );
    this.node = element('div', 'lmsp-answer');
    const header = element('div', 'lmsp-header');
    this._stop.type = 'button';
    this._stop.textContent = this._trans.__('Stop');
    this._stop.title = this._trans.__('Stop generating');
    this._stop.addEventListener('click', () => {
      this._stopSent = true;
      this._stop.disabled = true;
      this._actions.stop();
    });
    this._shade.type = 'button';
    this._shade.textContent = this._trans.__('Probabilities');
    this._shade.title = this._trans.__(
      'Shade each token by its probability; hover a token for the likeliest alternatives'
    );
    this._shade.setAttribute('aria-pressed', 'false');
    this._shade.addEventListener('click', () => {
      this._items.shading = !this._items.shading;
      this._shade.setAttribute('aria-pressed', String(this._items.shading));
      this._update();
    });
    header.append(
      this._status,
      this._model,
      this._usage,
      this._rate,
      this._taskId,
      this._shade,
      this._stop
    );
    this._prompt.append(element('summary', 'lmsp-prompt-summary', this._trans.__('Prompt')));
    this._prompt.append(this._promptText);
    this._prompt.hidden = true;
    this.node.append(header, this._prompt, this._roundsNode, this._error, this._note);
  }

  /** Show a new durable state (a round started or ended, a decision changed). */
  setState(state: IAnswerState): void {
    this.answer.setState(state);
    this._prompt.hidden = !state.prompt;
    this._promptText.textContent = state.prompt ?? '';
    this._items.clearSent();
    this._stopSent = false;
    this._update();
  }

  /** Apply live events of `taskId`; ids already applied are ignored. */
  applyEvents(taskId: string, events: readonly ITaskEvent[]): void {
    if (this.answer.applyEvents(taskId, events, this._now())) {
      this._update();
    }
  }

  /** Enable or disable Stop, Approve and Deny; `note` says why they are disabled. */
  setActionsEnabled(enabled: boolean, note = ''): void {
    this._actionsEnabled = enabled;
    this._items.actionsEnabled = enabled;
    this._actionsNote = enabled ? '' : note;
    this._update();
  }

  /** A note from the host (a lost connection, expired history), or '' for none. */
  setNote(note: string): void {
    this._hostNote = note;
    this._updateNote();
  }

  private _update(): void {
    const answer = this.answer;
    const state = answer.state;
    if (!state) {
      return;
    }
    const rounds = answer.rounds();
    const status = answer.status();
    const last = rounds[rounds.length - 1];
    this.node.dataset.taskId = last?.taskId ?? '';
    this.node.dataset.status = status;
    this._status.textContent = status;
    this._status.className = `lmsp-status lmsp-status-${status}`;
    this._model.textContent = state.model;
    this._taskId.textContent = last?.taskId ?? '';
    const usage = answer.usage();
    this._usage.textContent = usage
      ? `${formatCount(usage.input_tokens)} in · ${formatCount(usage.output_tokens)} out` +
        (draftedTokens(usage) ? ` (${formatCount(draftedTokens(usage))} drafted)` : '')
      : '';
    const rate = answer.tokensPerSecond();
    this._rate.textContent = rate === null ? '' : formatRate(rate);
    this._stop.hidden = !answer.isRunning();
    this._shade.hidden = !rounds.some(round => round.items.some(item => item.logprobs?.length));
    this._stop.disabled = this._stopSent || !this._actionsEnabled;
    this._updateRounds(rounds, state.tool_calls);
    this._error.textContent = state.error
      ? `Error: ${state.error.detail ?? state.error.title ?? state.error.code ?? 'unknown'}`
      : '';
    this._error.hidden = !state.error;
    this._updateNote();
  }

  private _updateNote(): void {
    const note = [this._hostNote, this._actionsNote].filter(Boolean).join(' ');
    this._note.textContent = note;
    this._note.hidden = note === '';
  }

  private _updateRounds(rounds: IRoundView[], calls: Record<string, IToolCallState>): void {
    const seen = new Set<string>();
    for (const round of rounds) {
      seen.add(round.taskId);
      let dom = this._rounds.get(round.taskId);
      if (!dom) {
        dom = {
          node: element('div', 'lmsp-round'),
          end: element('div', 'lmsp-round-end'),
          items: new Map()
        };
        dom.node.dataset.taskId = round.taskId;
        dom.node.append(dom.end);
        this._rounds.set(round.taskId, dom);
      }
      this._roundsNode.append(dom.node);
      this._items.update(dom, round, calls);
      this._updateRoundEnd(dom.end, round);
    }
    for (const [taskId, dom] of Array.from(this._rounds)) {
      if (!seen.has(taskId)) {
        dom.node.remove();
        this._rounds.delete(taskId);
      }
    }
  }

  private _updateRoundEnd(node: HTMLElement, round: IRoundView): void {
    let text = '';
    if (round.status === 'incomplete') {
      text = `Stopped early: ${round.incompleteReason ?? 'unknown reason'}.`;
    } else if (round.status === 'cancelled') {
      text = 'Cancelled.';
    } else if (round.status === 'failed') {
      const error = round.error;
      text = `Failed: ${error?.detail ?? error?.title ?? error?.code ?? 'unknown error'}`;
    }
    node.textContent = text;
    node.hidden = text === '';
  }
}
