import { beforeEach, describe, expect, it, vi } from 'vitest';

import { AnswerView } from '../src/render';
import type { ILogprob, ITaskEvent } from '../src/protocol/types';
import { formatProbability, tokenTitle } from '../src/render/shading';
import { MSG, RESP, TASK, created, messageAdded, state } from './fixtures';

const TOKENS: ILogprob[] = [
  {
    token: 'Paris',
    logprob: Math.log(0.9),
    top_logprobs: [
      { token: 'Paris', logprob: Math.log(0.9) },
      { token: 'Lyon', logprob: Math.log(0.05) }
    ]
  },
  { token: ' is', logprob: Math.log(0.25), top_logprobs: [] }
];

function delta(id: number, text: string, logprobs?: ILogprob[]): ITaskEvent {
  return {
    id,
    event: 'response.output_text.delta',
    data: { response_id: RESP, item_id: MSG, delta: text, ...(logprobs ? { logprobs } : {}) }
  };
}

let frames: (() => void)[];

function view(...events: ITaskEvent[]): AnswerView {
  const answer = new AnswerView(
    { stop: vi.fn(), decide: vi.fn() },
    { now: () => 0, requestFrame: callback => frames.push(callback) }
  );
  answer.setState(state());
  answer.applyEvents(TASK, [created(1), messageAdded(2), ...events]);
  return answer;
}

function shade(answer: AnswerView): HTMLButtonElement {
  return answer.node.querySelector<HTMLButtonElement>('button.lmsp-shade')!;
}

beforeEach(() => {
  frames = [];
});

describe('token shading', () => {
  it('offers no toggle for an answer without logprobs', () => {
    expect(shade(view(delta(3, 'Paris is'))).hidden).toBe(true);
  });

  it('shades each token by its probability, alternatives on hover, and toggles back', () => {
    const answer = view(delta(3, 'Paris', [TOKENS[0]]), delta(4, ' is', [TOKENS[1]]));
    const button = shade(answer);
    expect(button.hidden).toBe(false);
    button.click();
    expect(button.getAttribute('aria-pressed')).toBe('true');
    const spans = Array.from(answer.node.querySelectorAll<HTMLElement>('.lmsp-token'));
    expect(spans.map(span => span.textContent)).toEqual(['Paris', ' is']);
    expect(spans.map(span => span.style.getPropertyValue('--lmsp-token-shade'))).toEqual([
      '0.100',
      '0.750'
    ]);
    expect(spans[0].title).toBe('"Paris"  90%\n\n"Paris"  90%\n"Lyon"  5.0%');
    answer.applyEvents(TASK, [delta(5, ' big', [{ token: ' big', logprob: -2 }])]);
    expect(answer.node.querySelectorAll('.lmsp-token')).toHaveLength(3);
    button.click();
    frames.forEach(callback => callback());
    expect(answer.node.querySelector('.lmsp-token')).toBeNull();
    expect(answer.node.querySelector('.lmsp-message')?.textContent).toBe('Paris is big');
  });

  it('formats probabilities and hover text', () => {
    expect(formatProbability(0)).toBe('100%');
    expect(formatProbability(Math.log(0.0123))).toBe('1.2%');
    expect(tokenTitle({ token: '\n', logprob: 0 })).toBe('"\\n"  100%');
  });
});
