/**
 * A message's tokens shaded by their probability: the less likely a token was, the deeper its
 * shade; hovering shows its probability and the most likely tokens at its place.
 */
import { element } from './dom';
import type { ILogprob, ITopLogprob } from '../protocol/types';

/** A probability as a short percentage. */
export function formatProbability(logprob: number): string {
  const percent = Math.exp(logprob) * 100;
  return percent >= 10 || percent === 0 ? `${percent.toFixed(0)}%` : `${percent.toPrecision(2)}%`;
}

/** A token as the hover text shows it: quoted, its whitespace visible. */
function shown(token: string): string {
  return JSON.stringify(token);
}

/** What hovering a token shows: its probability, then the alternatives, one a line. */
export function tokenTitle(entry: ILogprob): string {
  const lines = [`${shown(entry.token)}  ${formatProbability(entry.logprob)}`];
  const top: ITopLogprob[] = entry.top_logprobs ?? [];
  if (top.length) {
    lines.push('', ...top.map(alt => `${shown(alt.token)}  ${formatProbability(alt.logprob)}`));
  }
  return lines.join('\n');
}

/** Fill `node` with one span per token, shaded by `1 - probability`. */
export function renderShaded(node: HTMLElement, logprobs: readonly ILogprob[]): void {
  const spans = logprobs.map(entry => {
    const span = element('span', 'lmsp-token', entry.token);
    const probability = Math.exp(entry.logprob);
    span.style.setProperty('--lmsp-token-shade', (1 - probability).toFixed(3));
    span.dataset.probability = probability.toFixed(4);
    span.title = tokenTitle(entry);
    return span;
  });
  const text = element('div', 'lmsp-shaded');
  text.append(...spans);
  node.replaceChildren(text);
}
