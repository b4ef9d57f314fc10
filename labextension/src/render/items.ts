/**
 * The DOM of a round's output items, updated in place: a running message gets its deltas
 * appended to a text node and its Markdown re-rendered at most once per frame; a function
 * call shows its arguments, output and, while it waits for the user, Approve and Deny (an
 * MCP call's approval request also "Always for this tool"); a call the service ran on an MCP
 * server shows its output or error, and the tools an MCP server listed show folded. With
 * `shading` on, a message that has logprobs shows its tokens shaded by probability instead.
 */
import { renderMarkdown, textEnd } from './markdown';
import { renderShaded } from './shading';
import type { IItemView, IRoundView } from './reducer';
import type { IToolCallState } from '../protocol/types';
import { element } from './dom';

interface IMessageDom {
  node: HTMLElement;
  tail: Text;
  /** The text the node shows: rendered Markdown followed by the tail. */
  shown: string;
  /** Whether the node holds `shown` rendered as Markdown (no pending tail). */
  rendered: boolean;
  /** How many shaded tokens the node shows; -1 while it shows the text. */
  shadedTokens: number;
}

interface IItemDom {
  node: HTMLElement;
  /** What the node was last drawn from; unchanged keys are not redrawn. */
  key: string;
  message?: IMessageDom;
  body?: Text;
}

/** A round's element, its end note (kept last) and its items by id. */
export interface IRoundDom {
  node: HTMLElement;
  end: HTMLElement;
  items: Map<string, IItemDom>;
}

function prettyArguments(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** Sends a click on Approve or Deny; `always` approves an MCP tool for the kernel session. */
export type DecideAction = (callId: string, decision: 'approve' | 'deny', always?: boolean) => void;

/** A call's head: what it is, the MCP server it belongs to (if any), the tool's name. */
function callHead(label: string, item: IItemView): HTMLElement {
  const head = element('div', 'lmsp-call-head');
  head.append(element('span', 'lmsp-call-label', label));
  if (item.serverLabel !== undefined) {
    head.append(element('span', 'lmsp-call-server', item.serverLabel));
  }
  head.append(element('code', 'lmsp-call-name', item.name ?? ''));
  return head;
}

/** A labelled block of text under a call: its output or its error. */
function outputBlock(label: string, text: string, className = 'lmsp-call-output'): HTMLElement {
  const block = element('div', className);
  block.append(element('div', 'lmsp-call-output-label', label), element('pre', '', text));
  return block;
}

/** The items of every round of one view; `decide` sends a click on Approve or Deny. */
export class ItemsDom {
  /** Whether Approve and Deny may be clicked. */
  actionsEnabled = true;
  /** Whether messages with logprobs show their tokens shaded by probability. */
  shading = false;

  private readonly _decide: DecideAction;
  private readonly _requestFrame: (callback: () => void) => void;
  private readonly _sent = new Set<string>();
  private readonly _dirtyMessages = new Set<IMessageDom>();
  private _frameRequested = false;

  constructor(decide: DecideAction, requestFrame: (callback: () => void) => void) {
    this._decide = decide;
    this._requestFrame = requestFrame;
  }

  /** Forget the decisions sent: a new state says what became of them. */
  clearSent(): void {
    this._sent.clear();
  }

  /** Bring the items of `dom` up to `round`; `calls` are the ask's decided function calls. */
  update(dom: IRoundDom, round: IRoundView, calls: Record<string, IToolCallState>): void {
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
      } else if (item.type === 'mcp_list_tools') {
        this._updateMcpTools(itemDom, item);
      } else if (item.type === 'mcp_call') {
        this._updateMcpCall(itemDom, item);
      } else {
        this._updateCall(itemDom, item, round, item.callId ? calls[item.callId] : undefined);
      }
    }
  }

  private _createItem(item: IItemView): IItemDom {
    if (item.type === 'message') {
      const node = element('div', 'lmsp-message jp-RenderedHTMLCommon');
      const tail = document.createTextNode('');
      node.append(tail);
      node.dataset.type = 'message';
      node.dataset.itemId = item.id;
      return {
        node,
        key: '',
        message: { node, tail, shown: '', rendered: true, shadedTokens: -1 }
      };
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
    const node =
      item.type === 'mcp_list_tools'
        ? element('details', 'lmsp-mcp-tools')
        : element('div', item.type === 'mcp_call' ? 'lmsp-call lmsp-mcp-call' : 'lmsp-call');
    node.dataset.type = item.type;
    node.dataset.itemId = item.id;
    return { node, key: '' };
  }

  private _updateMessage(dom: IMessageDom, item: IItemView): void {
    dom.node.classList.toggle('lmsp-running', !item.done);
    if (this.shading && item.logprobs?.length) {
      if (dom.shadedTokens !== item.logprobs.length) {
        this._dirtyMessages.delete(dom);
        renderShaded(dom.node, item.logprobs);
        dom.shadedTokens = item.logprobs.length;
      }
      return;
    }
    if (dom.shadedTokens >= 0) {
      // back to the text: drawn again from the start
      dom.shadedTokens = -1;
      dom.tail = document.createTextNode('');
      dom.node.replaceChildren(dom.tail);
      dom.shown = '';
    }
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

  private _renderMessage(dom: IMessageDom, done: boolean): void {
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

  private _updateReasoning(dom: IItemDom, item: IItemView): void {
    const body = dom.body!;
    if (item.text.startsWith(body.data)) {
      body.appendData(item.text.slice(body.data.length));
    } else {
      body.data = item.text;
    }
    dom.node.classList.toggle('lmsp-running', !item.done);
  }

  private _updateCall(
    dom: IItemDom,
    item: IItemView,
    round: IRoundView,
    call: IToolCallState | undefined
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
      call?.runs_in,
      sent,
      this.actionsEnabled
    ]);
    if (key === dom.key) {
      return;
    }
    dom.key = key;
    const node = dom.node;
    node.dataset.callId = callId;
    node.dataset.decision = decision;
    // a notebook tool changes the notebook once approved (JupyterLab performs it)
    const notebook = call?.runs_in === 'notebook';
    // an MCP call runs on its server, in the service, once approved
    const mcp = item.serverLabel !== undefined;
    node.dataset.runsIn = notebook ? 'notebook' : mcp ? 'service' : 'kernel';
    const label = notebook ? 'Notebook tool' : mcp ? 'MCP tool' : 'Function call';
    const head = callHead(label, item);
    head.append(element('span', `lmsp-call-decision lmsp-decision-${decision}`, decision));
    const args = element(
      'pre',
      'lmsp-call-arguments',
      item.done ? prettyArguments(item.text) : item.text
    );
    node.replaceChildren(head, args);
    if (call?.output !== null && call?.output !== undefined) {
      node.append(outputBlock('Output', call.output));
    }
    if (decision === 'pending' && call) {
      node.append(this._decisionButtons(callId, sent, mcp));
    }
  }

  /** A call the service ran on an MCP server: its tool, arguments, and output or error. */
  private _updateMcpCall(dom: IItemDom, item: IItemView): void {
    const key = JSON.stringify([item.text, item.done, item.name, item.output, item.error]);
    if (key === dom.key) {
      return;
    }
    dom.key = key;
    const failed = item.error !== null && item.error !== undefined;
    const outcome = !item.done ? 'running' : failed ? 'error' : 'done';
    dom.node.dataset.outcome = outcome;
    const head = callHead('MCP call', item);
    head.append(element('span', `lmsp-call-decision lmsp-mcp-${outcome}`, outcome));
    const args = element('pre', 'lmsp-call-arguments', prettyArguments(item.text));
    dom.node.replaceChildren(head, args);
    if (failed) {
      dom.node.append(outputBlock('Error', item.error ?? '', 'lmsp-call-error'));
    } else if (item.output !== null && item.output !== undefined) {
      dom.node.append(outputBlock('Output', item.output));
    }
  }

  /** The tools an MCP server listed, folded: `files: 3 tools`, then their names. */
  private _updateMcpTools(dom: IItemDom, item: IItemView): void {
    const key = JSON.stringify([item.text, item.error]);
    if (key === dom.key) {
      return;
    }
    dom.key = key;
    const names = item.text ? item.text.split(', ') : [];
    const summary = element(
      'summary',
      'lmsp-mcp-tools-summary',
      item.error
        ? `${item.serverLabel}: cannot list its tools`
        : `${item.serverLabel}: ${names.length} ${names.length === 1 ? 'tool' : 'tools'}`
    );
    const list = element('div', 'lmsp-mcp-tools-names', item.error ?? names.join(' · '));
    dom.node.replaceChildren(summary, list);
  }

  private _decisionButtons(callId: string, sent: boolean, mcp: boolean): HTMLElement {
    const bar = element('div', 'lmsp-call-actions');
    const approve = element('button', 'lmsp-approve jp-mod-styled jp-mod-accept', 'Approve');
    const deny = element('button', 'lmsp-deny jp-mod-styled jp-mod-reject', 'Deny');
    const buttons: [HTMLButtonElement, 'approve' | 'deny', boolean][] = [
      [approve, 'approve', false],
      [deny, 'deny', false]
    ];
    if (mcp) {
      const always = element('button', 'lmsp-always jp-mod-styled', 'Always for this tool');
      buttons.push([always, 'approve', true]);
    }
    for (const [button, decision, always] of buttons) {
      button.type = 'button';
      button.disabled = sent || !this.actionsEnabled;
      button.addEventListener('click', () => {
        this._sent.add(callId);
        for (const [other] of buttons) {
          other.disabled = true;
        }
        if (always) {
          this._decide(callId, decision, true);
        } else {
          this._decide(callId, decision);
        }
      });
      bar.append(button);
    }
    return bar;
  }
}
