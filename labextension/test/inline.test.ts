import { describe, expect, it } from 'vitest';

import {
  asComments,
  CHARS_PER_TOKEN,
  keepEnd,
  keepStart,
  lineComment,
  pickModel,
  promptParts,
  type ICellText
} from '../src/inline/context';
import { completionTexts } from '../src/inline/provider';
import type { ILmspModel } from '../src/protocol/types';

const code = (source: string): ICellText => ({ kind: 'code', source });

describe('promptParts', () => {
  it('puts the code cells above before the cell, Markdown as comments, raw cells out', () => {
    const above: ICellText[] = [
      code('import math\n'),
      { kind: 'markdown', source: '# Fibonacci\nThe sequence.' },
      { kind: 'raw', source: 'not code' }
    ];
    const parts = promptParts(above, 'def fibonacci(n):\n', '\nprint(1)', 'python', 1500);
    expect(parts.prompt).toBe(
      'import math\n\n# # Fibonacci\n# The sequence.\n\ndef fibonacci(n):\n'
    );
    expect(parts.suffix).toBe('\nprint(1)');
  });

  it('drops whole cells from the top to fit the budget, the cell itself kept', () => {
    const above = [code('a'.repeat(40)), code('b'.repeat(40)), code('c'.repeat(10))];
    const parts = promptParts(above, 'x = 1\n', '', 'python', 40 / CHARS_PER_TOKEN);
    expect(parts.prompt).toBe(`${'c'.repeat(10)}\n\nx = 1\n`);
  });

  it('keeps the start of the prompt while the user types on', () => {
    const above = Array.from({ length: 30 }, (_, i) => code(`x${i} = ${i}`));
    const first = promptParts(above, 'def f(', '', 'python', 40);
    const later = promptParts(above, 'def f(a, b', '', 'python', 40);
    expect(later.prompt.startsWith(first.prompt.slice(0, -1))).toBe(true);
    expect(first.prompt.length).toBeLessThanOrEqual(40 * CHARS_PER_TOKEN);
  });

  it('moves the start of the prompt once a quarter of the budget is typed, not every cell', () => {
    const above = Array.from({ length: 60 }, (_, i) => code(`x${i} = ${i}`));
    const budget = 40; // tokens: a room of 120 characters, steps of 30
    const typed = 'total = ' + Array.from({ length: 10 }, (_, i) => `x${i}`).join(' + ');
    const starts = new Set<string>();
    for (let end = 1; end <= typed.length; end++) {
      const parts = promptParts(above, typed.slice(0, end), '', 'python', budget);
      expect(parts.prompt.length).toBeLessThanOrEqual(budget * CHARS_PER_TOKEN);
      starts.add(parts.prompt.slice(0, 8));
    }
    // the text grows by typed.length (about 70) characters, crossing 8 cell boundaries
    expect(starts.size).toBeLessThanOrEqual(Math.ceil(typed.length / 30) + 1);
    expect(starts.size).toBeGreaterThan(1);
  });

  it('gives the suffix at most a quarter of the budget, from its start', () => {
    const after = Array.from({ length: 50 }, (_, i) => `line${i}`).join('\n');
    const parts = promptParts([], 'x', after, 'python', 40);
    expect(parts.suffix.length).toBeLessThanOrEqual(30);
    expect(after.startsWith(parts.suffix)).toBe(true);
  });
});

describe('keepEnd and keepStart', () => {
  it('cut a long cell in steps at line starts, so the cut stays put as text grows', () => {
    const text = Array.from({ length: 100 }, (_, i) => `row ${i}`).join('\n');
    const cut = keepEnd(text, 200);
    expect(cut.length).toBeLessThanOrEqual(200);
    expect(text.endsWith(cut)).toBe(true);
    expect(keepEnd(`${text}x`, 200)).toBe(`${cut}x`);
    expect(keepStart('short', 10)).toBe('short');
    expect(keepStart('one\ntwo\nthree', 9)).toBe('one\ntwo');
  });
});

describe('comments', () => {
  it('use the kernel language line comment', () => {
    expect(lineComment('Python')).toBe('#');
    expect(lineComment('javascript')).toBe('//');
    expect(asComments('a\n\nb', 'sql')).toBe('-- a\n--\n-- b');
  });
});

describe('pickModel', () => {
  const model = (id: string, status: ILmspModel['status'], fim: boolean): ILmspModel => ({
    id,
    status,
    size_bytes: 1,
    owned_by: 'local',
    context_length: 2048,
    capabilities: fim ? ['streaming', 'fim'] : ['streaming']
  });

  it('takes the named model, else a loaded FIM one, else the first loaded, else the first', () => {
    const plain = model('a', 'available', false);
    const loaded = model('b', 'loaded', false);
    const coder = model('c', 'available', true);
    const loadedCoder = model('d', 'loaded', true);
    expect(pickModel([plain, loaded, coder, loadedCoder], 'x')).toBe('x');
    expect(pickModel([plain, loaded, coder, loadedCoder], '')).toBe('d');
    expect(pickModel([plain, coder, loaded], '')).toBe('b');
    expect(pickModel([plain, coder], '')).toBe('a');
    expect(pickModel([], '')).toBeNull();
  });
});

function streamOf(text: string): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  return new ReadableStream({
    start(controller) {
      // in two pieces, the second one mid-frame
      controller.enqueue(bytes.slice(0, 25));
      controller.enqueue(bytes.slice(25));
      controller.close();
    }
  });
}

const chunk = (text: string): string =>
  `data: ${JSON.stringify({ object: 'text_completion', choices: [{ text, index: 0 }] })}\n\n`;

describe('completionTexts', () => {
  it('yields the text of each chunk up to [DONE]', async () => {
    const body = streamOf(`retry: 2000\n${chunk('    if')}${chunk(' n')}data: [DONE]\n\n`);
    const texts: string[] = [];
    for await (const text of completionTexts(body, new AbortController().signal)) {
      texts.push(text);
    }
    expect(texts).toEqual(['    if', ' n']);
  });

  it('throws the error a stream ends with', async () => {
    const body = streamOf(`data: ${JSON.stringify({ error: { detail: 'gone' } })}\n\n`);
    const read = async (): Promise<void> => {
      for await (const text of completionTexts(body, new AbortController().signal)) {
        expect(text).toBe('never');
      }
    };
    await expect(read()).rejects.toThrow('gone');
  });
});
