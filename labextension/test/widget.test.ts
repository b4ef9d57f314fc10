import { describe, expect, it } from 'vitest';

import widget from '../src/widget';
import { TASK, created, messageAdded, state, textDelta } from './fixtures';

/** The part of an anywidget model the view uses, recording what it sends. */
class FakeModel {
  sent: Record<string, unknown>[] = [];
  private readonly _handlers = new Map<string, ((...args: any[]) => void)[]>();
  constructor(public value: unknown) {}
  get(): any {
    return this.value;
  }
  on(name: string, callback: (...args: any[]) => void): void {
    this._handlers.set(name, [...(this._handlers.get(name) ?? []), callback]);
  }
  off(name: string, callback: (...args: any[]) => void): void {
    this._handlers.set(
      name,
      (this._handlers.get(name) ?? []).filter(c => c !== callback)
    );
  }
  emit(name: string, ...args: unknown[]): void {
    (this._handlers.get(name) ?? []).forEach(callback => callback(...args));
  }
  send(content: Record<string, unknown>): void {
    this.sent.push(content);
  }
}

function mount(value: unknown) {
  const model = new FakeModel(value);
  const el = document.createElement('div');
  const cleanup = widget.render({ model, el });
  return { model, el, cleanup };
}

describe('anywidget view', () => {
  it('asks for the missed events of a running round when it starts', () => {
    const { model } = mount(state());
    expect(model.sent).toEqual([{ type: 'sync', task_id: TASK, after: 0 }]);
  });

  it('renders events from custom messages, ignoring re-sent ids', () => {
    const { model, el } = mount(state());
    const events = [created(1), messageAdded(2), textDelta(3, 'Once'), textDelta(4, ' upon')];
    model.emit('msg:custom', { type: 'events', task_id: TASK, events });
    model.emit('msg:custom', {
      type: 'events',
      task_id: TASK,
      events: [...events, textDelta(5, ' a time')]
    });
    expect(el.querySelector('.lmsp-message')?.textContent).toBe('Once upon a time');
  });

  it('sends stop and decide on clicks', () => {
    const { model, el } = mount(
      state({
        status: 'requires_action',
        rounds: [
          {
            task_id: TASK,
            response: {
              id: 'r',
              status: 'completed',
              model: 'm',
              output: [
                { type: 'function_call', id: 'fc', call_id: 'call_1', name: 'f', arguments: '{}' }
              ]
            }
          }
        ],
        tool_calls: { call_1: { name: 'f', arguments: '{}', decision: 'pending', output: null } }
      })
    );
    (el.querySelector('.lmsp-deny') as HTMLButtonElement).click();
    expect(model.sent).toEqual([{ type: 'decide', call_id: 'call_1', decision: 'deny' }]);
    model.value = state();
    model.emit('change:state');
    (el.querySelector('.lmsp-stop') as HTMLButtonElement).click();
    expect(model.sent.at(-1)).toEqual({ type: 'stop' });
  });

  it('waits for a state before rendering and stops listening when removed', () => {
    const { model, el, cleanup } = mount({});
    expect(model.sent).toEqual([]);
    expect(el.querySelector('.lmsp-status')?.textContent).toBe('');
    cleanup();
    expect(el.querySelector('.lmsp-answer')).toBeNull();
  });
});
