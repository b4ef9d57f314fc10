/**
 * The anywidget view of `lmsp_jupyter.kernel.widget.AnswerWidget`: state from the
 * `state` trait, live events from the kernel's custom messages, clicks back to it.
 */
import css from '../style/base.css';
import { AnswerView } from './render';
import type { IAnswerState, ITaskEvent } from './protocol/types';

/** The part of anywidget's model this view uses. */
interface IAnswerModel {
  get(name: 'state'): IAnswerState | Record<string, never>;
  on(name: string, callback: (...args: any[]) => void): void;
  off(name: string, callback: (...args: any[]) => void): void;
  send(content: Record<string, unknown>): void;
}

interface IEventsMessage {
  type: 'events';
  task_id: string;
  events: ITaskEvent[];
}

const STYLE_ID = 'lmsp-answer-style';

function injectStyle(): void {
  if (!document.getElementById(STYLE_ID)) {
    const style = document.createElement('style');
    style.id = STYLE_ID;
    style.textContent = css;
    document.head.append(style);
  }
}

function isState(value: unknown): value is IAnswerState {
  return (
    typeof value === 'object' && value !== null && Array.isArray((value as IAnswerState).rounds)
  );
}

function render({ model, el }: { model: IAnswerModel; el: HTMLElement }): () => void {
  injectStyle();
  const view = new AnswerView({
    stop: () => model.send({ type: 'stop' }),
    decide: (callId, decision, always) =>
      model.send({ type: 'decide', call_id: callId, decision, ...(always ? { always } : {}) })
  });
  el.append(view.node);
  const onState = (): void => {
    const state = model.get('state');
    if (isState(state)) {
      view.setState(state);
    }
  };
  const onMessage = (message: IEventsMessage): void => {
    if (message?.type === 'events' && Array.isArray(message.events)) {
      view.applyEvents(message.task_id, message.events);
    }
  };
  onState();
  model.on('change:state', onState);
  model.on('msg:custom', onMessage);
  // A view that starts while a round runs (a page reload) asks for what it missed.
  for (const taskId of view.answer.runningTaskIds()) {
    model.send({ type: 'sync', task_id: taskId, after: view.answer.lastEventId(taskId) });
  }
  return () => {
    model.off('change:state', onState);
    model.off('msg:custom', onMessage);
    view.node.remove();
  };
}

export default { render };
