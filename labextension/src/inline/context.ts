/**
 * What an inline completion asks the model for, with no DOM: the text before the cursor (the
 * cells above, Markdown as comments, then the current cell up to the cursor) and the text
 * after it, trimmed to a token budget from the far ends.
 *
 * The prompt is trimmed by whole cells from the top, and inside one long cell in large steps
 * at line starts, so that its start stays the same from one keystroke to the next and the
 * service serves all but its last few tokens from the prefix cache.
 */
import type { ILmspModel } from '../protocol/types';

/** A cell above the cursor: its kind and text. */
export interface ICellText {
  kind: 'code' | 'markdown' | 'raw';
  source: string;
}

/** The `prompt` and `suffix` of a Completions request. */
export interface IPromptParts {
  prompt: string;
  suffix: string;
}

/** Characters a token of code stands for, about: a budget in tokens becomes one of characters. */
export const CHARS_PER_TOKEN = 3;

/** The line comment of each kernel language that does not write `#`. */
const LINE_COMMENTS: Record<string, string> = {
  c: '//',
  'c++': '//',
  cpp: '//',
  csharp: '//',
  go: '//',
  java: '//',
  javascript: '//',
  kotlin: '//',
  rust: '//',
  scala: '//',
  swift: '//',
  typescript: '//',
  haskell: '--',
  lua: '--',
  sql: '--',
  matlab: '%',
  octave: '%',
  erlang: '%',
  prolog: '%',
  fortran: '!',
  lisp: ';',
  scheme: ';',
  clojure: ';;'
};

/** How a line comment starts in `language` (a kernel's `language_info.name`): `#` by default. */
export function lineComment(language: string): string {
  return LINE_COMMENTS[language.toLowerCase()] ?? '#';
}

/** `text` as line comments of `language`. */
export function asComments(text: string, language: string): string {
  const comment = lineComment(language);
  return text
    .split('\n')
    .map(line => (line ? `${comment} ${line}` : comment))
    .join('\n');
}

/** The text a cell above adds to the prompt: code as it is, Markdown as comments, raw none. */
function cellPart(cell: ICellText, language: string): string {
  const source = cell.source.replace(/\s+$/, '');
  if (!source || cell.kind === 'raw') {
    return '';
  }
  return `${cell.kind === 'markdown' ? asComments(source, language) : source}\n\n`;
}

/**
 * The end of `text` in at most `budget` characters, cut in steps of a quarter of the budget
 * and then at the next line start: the cut moves only when the text grows by a step.
 */
export function keepEnd(text: string, budget: number): string {
  if (text.length <= budget) {
    return text;
  }
  const step = Math.max(1, Math.floor(budget / 4));
  const cut = Math.ceil((text.length - budget) / step) * step;
  const line = text.indexOf('\n', cut);
  return line >= 0 && line + 1 < text.length ? text.slice(line + 1) : text.slice(cut);
}

/** The start of `text` in at most `budget` characters, ending at a line end if it can. */
export function keepStart(text: string, budget: number): string {
  if (text.length <= budget) {
    return text;
  }
  const line = text.lastIndexOf('\n', budget);
  return text.slice(0, line > 0 ? line : budget);
}

/**
 * The prompt and suffix of a completion at the cursor: `above` (the cells above the current
 * one, top first) and `before` form the prompt, `after` the suffix. The suffix takes at most a
 * quarter of `budgetTokens`. Cells are dropped from the top as `keepEnd` cuts: what is over the
 * rest is rounded up to a step of a quarter of it, and whole cells go until that much has, so
 * the cells dropped change only each time the user has typed another step, not at every cell
 * boundary the growing text crosses.
 */
export function promptParts(
  above: ICellText[],
  before: string,
  after: string,
  language: string,
  budgetTokens: number
): IPromptParts {
  const budget = Math.max(1, budgetTokens) * CHARS_PER_TOKEN;
  const suffix = keepStart(after, Math.floor(budget / 4));
  const room = budget - suffix.length;
  const parts = above.map(cell => cellPart(cell, language)).filter(part => part);
  const over = parts.reduce((total, part) => total + part.length, 0) + before.length - room;
  const step = Math.max(1, Math.floor(room / 4));
  const cut = over > 0 ? Math.ceil(over / step) * step : 0;
  let dropped = 0;
  while (parts.length && dropped < cut) {
    dropped += parts.shift()!.length;
  }
  return { prompt: parts.join('') + keepEnd(before, room), suffix };
}

/**
 * The model to complete with: the one the settings name, else a loaded model that fills in
 * the middle, else the first loaded, else the first listed; `null` when there is none.
 */
export function pickModel(models: ILmspModel[], named: string): string | null {
  if (named) {
    return named;
  }
  const loaded = models.filter(model => model.status === 'loaded');
  const filling = loaded.find(model => model.capabilities.includes('fim'));
  return (filling ?? loaded[0] ?? models[0])?.id ?? null;
}
