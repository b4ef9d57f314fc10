/**
 * The DOM of one ask. It is updated in place: a running message gets its deltas
 * appended to a text node and its Markdown re-rendered at most once per frame.
 */
import { Answer } from './answer';
import { renderMarkdown, textEnd } from './markdown';
import { formatRate, type ItemView, type RoundView } from './reducer';
import type { AnswerState, TaskEvent, ToolCallState } from './types';
import { element } from './dom';

/** What the view's buttons ask the host to do. */
export interface AnswerActions {
  stop(): void;
  decide(callId: string, decision: 'approve' | 'deny'): void;
}

/** Host hooks; tests replace the clock and the frame scheduler. */
export interface AnswerViewOptions {
  now?: () => number;
  requestFrame?: (callback: () => void) => void;
}

interface MessageDom {
  node: HTMLElement;
  tail: Text;
  /** The text the node shows: rendered Markdown followed by the tail. */
  shown: string;
  /** Whether the node holds `shown` rendered as Markdown (no pending tail). */
  rendered: boolean;
}

interface ItemDom {
  node: HTMLElement;
  /** What the node was last drawn from; unchanged keys are not redrawn. */
  key: string;
  message?: MessageDom;
  body?: Text;
}

interface RoundDom {
  node: HTMLElement;
  end: HTMLElement;
  items: Map<string, ItemDom>;
}

function prettyArguments(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function formatCount(value: number): string {
  return value.toLocaleString('en-US');
}

/** The view of one ask: header, rounds of items, notes; `node` is the root element. */
export class AnswerView {
  readonly node: HTMLDivElement;
  readonly answer = new Answer();

  private readonly _actions: AnswerActions;
  private readonly _now: () => number;
  private readonly _requestFrame: (callback: () => void) => void;
  private readonly _status = element('span', 'lmsp-status');
  private readonly _model = element('span', 'lmsp-model');
  private readonly _usage = element('span', 'lmsp-usage');
  private readonly _rate = element('span', 'lmsp-rate');
  private readonly _taskId = element('code', 'lmsp-task-id');
  private readonly _stop = element('button', 'lmsp-stop jp-mod-styled', 'Stop');
  private readonly _note = element('div', 'lmsp-note');
  private readonly _error = element('div', 'lmsp-error');
  private readonly _roundsNode = element('div', 'lmsp-rounds');
  private readonly _rounds = new Map<string, RoundDom>();
  private readonly _sent = new Set<string>();
  private readonly _dirtyMessages = new Set<MessageDom>();
  private _frameRequested = false;
  private _stopSent = false;
  private _actionsEnabled = true;
  private _actionsNote = '';
  private _hostNote = '';

  constructor(actions: AnswerActions, options: AnswerViewOptions = {}) {
    this._actions = actions;
    this._now = options.now ?? (() => performance.now());
    this._requestFrame = options.requestFrame ?? (callback => requestAnimationFrame(callback));
    this.node = element('div', 'lmsp-answer');
    const header = element('div', 'lmsp-header');
    this._stop.type = 'button';
    this._stop.title = 'Stop generating';
    this._stop.addEventListener('click', () => {
      this._stopSent = true;
      this._stop.disabled = true;
      this._actions.stop();
    });
    header.append(this._status, this._model, this._usage, this._rate, this._taskId, this._stop);
    this.node.append(header, this._roundsNode, this._error, this._note);
  }

  /** Show a new durable state (a round started or ended, a decision changed). */
  setState(state: AnswerState): void {
    this.answer.setState(state);
    this._sent.clear();
    this._stopSent = false;
    this._update();
  }

  /** Apply live events of `taskId`; ids already applied are ignored. */
  applyEvents(taskId: string, events: readonly TaskEvent[]): void {
    if (this.answer.applyEvents(taskId, events, this._now())) {
      this._update();
    }
  }

  /** Enable or disable Stop, Approve and Deny; `note` says why they are disabled. */
  setActionsEnabled(enabled: boolean, note = ''): void {
    this._actionsEnabled = enabled;
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
      ? `${formatCount(usage.input_tokens)} in · ${formatCount(usage.output_tokens)} out`
      : '';
    const rate = answer.tokensPerSecond();
    this._rate.textContent = rate === null ? '' : formatRate(rate);
    this._stop.hidden = !answer.isRunning();
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

  private _updateRounds(rounds: RoundView[], calls: Record<string, ToolCallState>): void {
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
      this._updateItems(dom, round, calls);
      this._updateRoundEnd(dom.end, round);
    }
    for (const [taskId, dom] of Array.from(this._rounds)) {
      if (!seen.has(taskId)) {
        dom.node.remove();
        this._rounds.delete(taskId);
      }
    }
  }

  private _updateItems(
    dom: RoundDom,
    round: RoundView,
    calls: Record<string, ToolCallState>
  ): void {
    const ids = new Set(round.items.map(item => item.id));
    for (const [id, itemDom] of Array.from(dom.items)) {
      if (!ids.has(id)) {
        itemDom.node.remove();
        dom.items.delete(id);
      }
    }
    for (const item of round.items) {
      let itemDom = dom.items.get(item.id);
      if (!itemDom || itemDom.node.dataset.type !== item.type) {
        itemDom?.node.remove();
        itemDom = this._createItem(item);
        dom.items.set(item.id, itemDom);
      }
      // Items are ordered by output index and new ones come last; the round's end stays last.
      if (itemDom.node.parentNode !== dom.node) {
        dom.node.insertBefore(itemDom.node, dom.end);
      }
      if (item.type === 'message') {
        this._updateMessage(itemDom.message!, item);
      } else if (item.type === 'reasoning') {
        this._updateReasoning(itemDom, item);
      } else {
        this._updateCall(itemDom, item, round, item.callId ? calls[item.callId] : undefined);
      }
    }
  }

  private _createItem(item: ItemView): ItemDom {
    if (item.type === 'message') {
      const node = element('div', 'lmsp-message jp-RenderedHTMLCommon');
      const tail = document.createTextNode('');
      node.append(tail);
      node.dataset.type = 'message';
      node.dataset.itemId = item.id;
      return { node, key: '', message: { node, tail, shown: '', rendered: true } };
    }
    if (item.type === 'reasoning') {
      const node = element('details', 'lmsp-reasoning');
      const summary = element('summary', 'lmsp-reasoning-summary', 'Reasoning');
      const text = element('div', 'lmsp-reasoning-text');
      const body = document.createTextNode('');
      text.append(body);
      node.append(summary, text);
      node.dataset.type = 'reasoning';
      node.dataset.itemId = item.id;
      return { node, key: '', body };
    }
    const node = element('div', 'lmsp-call');
    node.dataset.type = 'function_call';
    node.dataset.itemId = item.id;
    return { node, key: '' };
  }

  private _updateMessage(dom: MessageDom, item: ItemView): void {
    if (item.text.startsWith(dom.shown)) {
      const delta = item.text.slice(dom.shown.length);
      if (delta) {
        dom.tail.appendData(delta);
        dom.shown = item.text;
        dom.rendered = false;
      }
    } else {
      dom.shown = item.text;
      dom.rendered = false;
    }
    dom.node.classList.toggle('lmsp-running', !item.done);
    if (dom.rendered) {
      return;
    }
    if (item.done) {
      this._renderMessage(dom, true);
    } else {
      this._dirtyMessages.add(dom);
      this._scheduleFrame();
    }
  }

  private _renderMessage(dom: MessageDom, done: boolean): void {
    this._dirtyMessages.delete(dom);
    renderMarkdown(dom.node, dom.shown);
    const end = textEnd(dom.node);
    // Markdown drops a line break that ends the text so far; while the message streams the
    // tail keeps it, or the next word would stick to the last one ("place.The").
    const kept = done || /\s$/.test(end.textContent ?? '') ? '' : /\s*$/.exec(dom.shown)![0];
    dom.tail = document.createTextNode(kept);
    end.append(dom.tail);
    dom.rendered = true;
  }

  private _scheduleFrame(): void {
    if (this._frameRequested) {
      return;
    }
    this._frameRequested = true;
    this._requestFrame(() => {
      this._frameRequested = false;
      for (const dom of Array.from(this._dirtyMessages)) {
        this._renderMessage(dom, false);
      }
    });
  }

  private _updateReasoning(dom: ItemDom, item: ItemView): void {
    const body = dom.body!;
    if (item.text.startsWith(body.data)) {
      body.appendData(item.text.slice(body.data.length));
    } else {
      body.data = item.text;
    }
    dom.node.classList.toggle('lmsp-running', !item.done);
  }

  private _updateCall(
    dom: ItemDom,
    item: ItemView,
    round: RoundView,
    call: ToolCallState | undefined
  ): void {
    const decision =
      call?.decision ?? (item.done && round.status !== 'in_progress' ? 'pending' : 'generating');
    const callId = item.callId ?? '';
    const sent = this._sent.has(callId);
    const key = JSON.stringify([
      item.text,
      item.done,
      item.name,
      decision,
      call !== undefined, // a call the kernel knows gets buttons; one only seen live does not
      call?.output,
      sent,
      this._actionsEnabled
    ]);
    if (key === dom.key) {
      return;
    }
    dom.key = key;
    const node = dom.node;
    node.dataset.callId = callId;
    node.dataset.decision = decision;
    const head = element('div', 'lmsp-call-head');
    head.append(
      element('span', 'lmsp-call-label', 'Function call'),
      element('code', 'lmsp-call-name', item.name ?? ''),
      element('span', `lmsp-call-decision lmsp-decision-${decision}`, decision)
    );
    const args = element(
      'pre',
      'lmsp-call-arguments',
      item.done ? prettyArguments(item.text) : item.text
    );
    node.replaceChildren(head, args);
    if (call?.output !== null && call?.output !== undefined) {
      const output = element('div', 'lmsp-call-output');
      output.append(
        element('div', 'lmsp-call-output-label', 'Output'),
        element('pre', '', call.output)
      );
      node.append(output);
    }
    if (decision === 'pending' && call) {
      node.append(this._decisionButtons(callId, sent));
    }
  }

  private _decisionButtons(callId: string, sent: boolean): HTMLElement {
    const bar = element('div', 'lmsp-call-actions');
    const approve = element('button', 'lmsp-approve jp-mod-styled jp-mod-accept', 'Approve');
    const deny = element('button', 'lmsp-deny jp-mod-styled jp-mod-reject', 'Deny');
    for (const [button, decision] of [
      [approve, 'approve'],
      [deny, 'deny']
    ] as const) {
      button.type = 'button';
      button.disabled = sent || !this._actionsEnabled;
      button.addEventListener('click', () => {
        this._sent.add(callId);
        approve.disabled = true;
        deny.disabled = true;
        this._actions.decide(callId, decision);
      });
    }
    bar.append(approve, deny);
    return bar;
  }

  private _updateRoundEnd(node: HTMLElement, round: RoundView): void {
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
