import { markdownToHtml } from '../src/render/markdown';
import { beforeEach, describe, expect, it, vi } from 'vitest';

import { AnswerView, type IAnswerActions } from '../src/render';
import type {
  IAnswerState,
  IResponse,
  IRoundState,
  ITaskEvent,
  OutputItem
} from '../src/protocol/types';
import {
  MSG,
  RESP,
  TASK,
  completed,
  created,
  messageAdded,
  messageDone,
  state,
  textDelta
} from './fixtures';

/** A call of the tool `f` the model made, as a round's output holds it. */
const CALL = {
  type: 'function_call' as const,
  id: 'fc_1',
  call_id: 'call_1',
  name: 'f',
  arguments: '{}'
};

let frames: (() => void)[];
let clock: number;
let actions: IAnswerActions & { stop: ReturnType<typeof vi.fn>; decide: ReturnType<typeof vi.fn> };

function makeView(): AnswerView {
  return new AnswerView(actions, {
    now: () => clock,
    requestFrame: callback => frames.push(callback)
  });
}

/** A view showing `initial` (the fixtures' running answer unless given). */
function viewOf(initial: IAnswerState = state()): AnswerView {
  const view = makeView();
  view.setState(initial);
  return view;
}

/** A view of the running answer whose message has begun (created, message added), then `events`. */
function streaming(...events: ITaskEvent[]): AnswerView {
  const view = viewOf();
  view.applyEvents(TASK, [created(1), messageAdded(2), ...events]);
  return view;
}

/** A round of TASK whose response completed with `output`; `response` adds or changes fields. */
function finished(output: OutputItem[], response: Partial<IResponse> = {}): IRoundState {
  return {
    task_id: TASK,
    response: { id: RESP, status: 'completed', model: 'm', output, ...response }
  };
}

function flushFrames(): void {
  const pending = frames;
  frames = [];
  pending.forEach(callback => callback());
}

function text(view: AnswerView, selector: string): string {
  return view.node.querySelector(selector)?.textContent ?? '';
}

beforeEach(() => {
  frames = [];
  clock = 0;
  actions = { stop: vi.fn(), decide: vi.fn() };
});

describe('AnswerView', () => {
  it('renders the root with the task id, status and model', () => {
    const view = viewOf();
    expect(view.node.classList.contains('lmsp-answer')).toBe(true);
    expect(view.node.dataset.taskId).toBe(TASK);
    expect(text(view, '.lmsp-status')).toBe('in_progress');
    expect(text(view, '.lmsp-task-id')).toBe(TASK);
    expect(text(view, '.lmsp-model')).toBe('gemma3:270m-q4_k_m');
  });

  it('folds the prompt as sent when the state carries one, and hides the fold when not', () => {
    const view = viewOf(state({ prompt: '## Variables\nsales: list [3]\n\nwhy?' }));
    const fold = view.node.querySelector<HTMLDetailsElement>('details.lmsp-prompt')!;
    expect(fold.hidden).toBe(false);
    expect(fold.open).toBe(false);
    expect(text(view, '.lmsp-prompt-summary')).toBe('Prompt');
    expect(text(view, '.lmsp-prompt-text')).toBe('## Variables\nsales: list [3]\n\nwhy?');
    expect(viewOf().node.querySelector<HTMLDetailsElement>('details.lmsp-prompt')!.hidden).toBe(
      true
    );
  });

  it('grows the message text across deltas', () => {
    const view = streaming(textDelta(3, 'Once'));
    expect(text(view, '.lmsp-message')).toBe('Once');
    view.applyEvents(TASK, [textDelta(4, ' upon')]);
    expect(text(view, '.lmsp-message')).toBe('Once upon');
    flushFrames();
    view.applyEvents(TASK, [textDelta(5, ' a time')]);
    expect(text(view, '.lmsp-message')).toBe('Once upon a time');
  });

  it('appends deltas to a text node and renders markdown once per frame', () => {
    const view = streaming(textDelta(3, '**bold'));
    const message = view.node.querySelector('.lmsp-message')!;
    const node = message.lastChild;
    view.applyEvents(TASK, [textDelta(4, '** text')]);
    expect(message.lastChild).toBe(node);
    expect(message.querySelector('strong')).toBeNull();
    expect(frames).toHaveLength(1);
    flushFrames();
    expect(message.querySelector('strong')?.textContent).toBe('bold');
    expect(message.textContent?.trim()).toBe('bold text');
  });

  it('keeps the space that ends the text at a render, so the next word does not stick', () => {
    const view = streaming(textDelta(3, 'A small place.\n'));
    flushFrames();
    view.applyEvents(TASK, [textDelta(4, 'The')]);
    expect(text(view, '.lmsp-message')).toBe('A small place.\nThe');
  });

  it('adds no whitespace to a finished message', () => {
    const view = streaming(textDelta(3, 'A small place.\n'));
    view.applyEvents(TASK, [messageDone(4, 'A small place.\n')]);
    expect(text(view, '.lmsp-message')).toBe('A small place.');
  });

  it('ignores events with ids already applied', () => {
    const view = viewOf();
    const events = [created(1), messageAdded(2), textDelta(3, 'Once'), textDelta(4, ' upon')];
    view.applyEvents(TASK, events);
    view.applyEvents(TASK, events);
    view.applyEvents(TASK, [textDelta(4, ' upon'), textDelta(5, ' a time')]);
    flushFrames();
    expect(text(view, '.lmsp-message').trim()).toBe('Once upon a time');
  });

  it('keeps the live text when the kernel re-sends the same state', () => {
    const view = streaming(textDelta(3, 'Once'));
    view.setState(state());
    view.applyEvents(TASK, [textDelta(3, 'Once'), textDelta(4, ' more')]);
    expect(view.node.querySelectorAll('.lmsp-message')).toHaveLength(1);
    expect(text(view, '.lmsp-message')).toBe('Once more');
  });

  it('ignores unknown events and events of other tasks', () => {
    const view = streaming({ id: 3, event: 'response.future', data: {} });
    view.applyEvents('task_other', [textDelta(4, 'x')]);
    expect(view.answer.lastEventId(TASK)).toBe(3);
    expect(text(view, '.lmsp-message')).toBe('');
  });

  it('shows a finished round from its saved response', () => {
    const view = viewOf(
      state({
        status: 'completed',
        rounds: [
          finished(
            [
              {
                type: 'message',
                id: MSG,
                role: 'assistant',
                content: [{ type: 'output_text', text: '# Title\n\nBody' }]
              }
            ],
            {
              model: 'gemma3:270m-q4_k_m',
              usage: { input_tokens: 4, output_tokens: 12, total_tokens: 16 }
            }
          )
        ]
      })
    );
    expect(view.node.querySelector('.lmsp-message h1')?.textContent).toBe('Title');
    expect(text(view, '.lmsp-status')).toBe('completed');
    expect(text(view, '.lmsp-usage')).toBe('4 in · 12 out');
    expect((view.node.querySelector('.lmsp-stop') as HTMLButtonElement).hidden).toBe(true);
  });

  it('shows the stop button while running and calls stop on click', () => {
    const view = viewOf();
    const stop = view.node.querySelector('.lmsp-stop') as HTMLButtonElement;
    expect(stop.hidden).toBe(false);
    stop.click();
    expect(actions.stop).toHaveBeenCalledOnce();
    expect(stop.disabled).toBe(true);
  });

  it('computes tokens per second from output tokens and elapsed time', () => {
    const view = streaming();
    clock = 2000;
    view.applyEvents(TASK, [textDelta(3, 'a'), messageDone(4, 'a'), completed(5, 40)]);
    expect(text(view, '.lmsp-rate')).toBe('20.0 tok/s');
    expect(text(view, '.lmsp-usage')).toBe('5 in · 40 out');
  });

  it('says how many output tokens were verified from drafts', () => {
    const view = streaming();
    const done = completed(5, 40);
    const usage = { input_tokens: 5, output_tokens: 40, total_tokens: 45 };
    const drafted = { ...usage, extensions: { 'x-lmsp-jupyter': { accepted_draft_tokens: 25 } } };
    view.applyEvents(TASK, [
      textDelta(3, 'a'),
      messageDone(4, 'a'),
      { ...done, data: { ...done.data, usage: drafted } }
    ]);
    expect(text(view, '.lmsp-usage')).toBe('5 in · 40 out (25 drafted)');
  });

  it('shows the tokens per second the kernel timed for a saved round, and none without', () => {
    const saved = (seconds: number | null) =>
      state({
        status: 'completed',
        rounds: [
          {
            ...finished([], { usage: { input_tokens: 4, output_tokens: 30, total_tokens: 34 } }),
            seconds
          }
        ]
      });
    const view = viewOf(saved(1.5));
    expect(text(view, '.lmsp-rate')).toBe('20.0 tok/s');
    const untimed = viewOf(saved(null));
    expect(text(untimed, '.lmsp-rate')).toBe('');
  });

  it('collapses reasoning in a details element', () => {
    const view = viewOf();
    view.applyEvents(TASK, [
      created(1),
      {
        id: 2,
        event: 'response.output_item.added',
        data: {
          response_id: RESP,
          output_index: 0,
          item: { type: 'reasoning', id: 'rs_1', summary: [] }
        }
      },
      {
        id: 3,
        event: 'response.reasoning_summary_text.delta',
        data: { response_id: RESP, item_id: 'rs_1', delta: 'Think' }
      },
      {
        id: 4,
        event: 'response.reasoning_summary_text.delta',
        data: { response_id: RESP, item_id: 'rs_1', delta: 'ing' }
      }
    ]);
    const reasoning = view.node.querySelector('.lmsp-reasoning') as HTMLDetailsElement;
    expect(reasoning.tagName).toBe('DETAILS');
    expect(reasoning.open).toBe(false);
    expect(reasoning.querySelector('.lmsp-reasoning-text')?.textContent).toBe('Thinking');
  });

  it('shows a pending call with Approve and Deny that call decide', () => {
    const view = viewOf(
      state({
        status: 'requires_action',
        rounds: [
          finished([
            {
              type: 'function_call',
              id: 'fc_1',
              call_id: 'call_1',
              name: 'get_weather',
              arguments: '{"city":"Paris"}'
            }
          ])
        ],
        tool_calls: {
          call_1: {
            name: 'get_weather',
            arguments: '{"city":"Paris"}',
            decision: 'pending',
            output: null
          }
        }
      })
    );
    const card = view.node.querySelector('.lmsp-call[data-call-id="call_1"]')!;
    expect(card.querySelector('.lmsp-call-name')?.textContent).toBe('get_weather');
    expect(card.querySelector('.lmsp-call-arguments')?.textContent).toBe('{\n  "city": "Paris"\n}');
    expect(card.querySelector('.lmsp-call-decision')?.textContent).toBe('pending');
    (card.querySelector('.lmsp-approve') as HTMLButtonElement).click();
    expect(actions.decide).toHaveBeenCalledWith('call_1', 'approve');
    expect((card.querySelector('.lmsp-deny') as HTMLButtonElement).disabled).toBe(true);
  });

  it('says which calls are notebook tools', () => {
    const view = makeView();
    const pending = { arguments: '{}', decision: 'pending' as const, output: null };
    view.setState(
      state({
        status: 'requires_action',
        rounds: [finished([CALL])],
        tool_calls: { call_1: { ...pending, name: 'f', runs_in: 'notebook' } }
      })
    );
    const card = view.node.querySelector('.lmsp-call[data-call-id="call_1"]') as HTMLElement;
    expect(card.dataset.runsIn).toBe('notebook');
    expect(card.querySelector('.lmsp-call-label')?.textContent).toBe('Notebook tool');
    view.setState(
      state({
        status: 'requires_action',
        rounds: [finished([CALL])],
        tool_calls: { call_1: { ...pending, name: 'f' } }
      })
    );
    expect(card.dataset.runsIn).toBe('kernel');
    expect(card.querySelector('.lmsp-call-label')?.textContent).toBe('Function call');
  });

  it('adds Approve and Deny once the kernel state names a call first seen without it', () => {
    const view = makeView();
    const round = finished([CALL]);
    // the round ended before the kernel sent its decision state: no buttons yet
    view.setState(state({ status: 'in_progress', rounds: [round] }));
    const card = () => view.node.querySelector('.lmsp-call[data-call-id="call_1"]')!;
    expect(card().querySelector('.lmsp-approve')).toBeNull();
    view.setState(
      state({
        status: 'requires_action',
        rounds: [round],
        tool_calls: { call_1: { name: 'f', arguments: '{}', decision: 'pending', output: null } }
      })
    );
    expect(card().querySelector('.lmsp-approve')).not.toBeNull();
    expect(card().querySelector('.lmsp-deny')).not.toBeNull();
  });

  it('hides the buttons of a decided call and shows its output', () => {
    const view = makeView();
    view.setState(
      state({
        rounds: [finished([CALL]), { task_id: 'task_02', response: null }],
        tool_calls: {
          call_1: { name: 'f', arguments: '{}', decision: 'denied', output: 'denied by the user' }
        }
      })
    );
    const card = view.node.querySelector('.lmsp-call')!;
    expect(card.querySelector('.lmsp-approve')).toBeNull();
    expect(card.querySelector('.lmsp-call-output pre')?.textContent).toBe('denied by the user');
    expect(view.node.querySelectorAll('.lmsp-round')).toHaveLength(2);
    expect(view.node.dataset.taskId).toBe('task_02');
  });

  it('disables the buttons with a note when actions are unavailable', () => {
    const view = viewOf();
    view.setActionsEnabled(false, 'The kernel is not running.');
    expect((view.node.querySelector('.lmsp-stop') as HTMLButtonElement).disabled).toBe(true);
    expect(text(view, '.lmsp-note')).toBe('The kernel is not running.');
  });

  it('shows a cancelled round as cancelled', () => {
    const view = viewOf();
    view.applyEvents(TASK, [
      created(1),
      { id: 2, event: 'response.cancelled', data: { response_id: RESP, status: 'cancelled' } }
    ]);
    expect(text(view, '.lmsp-status')).toBe('cancelled');
    expect((view.node.querySelector('.lmsp-stop') as HTMLButtonElement).hidden).toBe(true);
  });

  it('shows a failed round with its problem', () => {
    const view = viewOf();
    const error = { code: 'generation_failed', detail: 'the model failed' };
    const failed = {
      id: 2,
      event: 'response.failed',
      data: { response_id: RESP, status: 'failed', error }
    };
    view.applyEvents(TASK, [created(1), failed]);
    expect(text(view, '.lmsp-status')).toBe('failed');
    expect(text(view, '.lmsp-round-end')).toBe('Failed: the model failed');
  });

  it('sanitizes model text rendered as markdown', () => {
    const hostile =
      'Hi <img src=x onerror="alert(1)"> <script>alert(2)</script>[a](javascript:alert(3))';
    const view = streaming(textDelta(3, hostile), messageDone(4, hostile));
    const message = view.node.querySelector('.lmsp-message')!;
    expect(message.querySelector('img')).not.toBeNull();
    expect(message.querySelector('[onerror]')).toBeNull();
    expect(message.querySelector('script')).toBeNull();
    expect(message.querySelector('a')?.getAttribute('href') ?? '').not.toContain('javascript');
  });
});

describe('markdownToHtml', () => {
  it('keeps the line breaks the model writes, one row of a pattern a line', () => {
    expect(markdownToHtml('Country: Germany\nCountry: China')).toBe(
      '<p>Country: Germany<br>Country: China</p>'
    );
  });
});
