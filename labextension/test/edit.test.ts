import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';

import { describe, expect, it } from 'vitest';

import { EDIT_STOP, editedSource, editPrompt } from '../src/edit/prompt';
import { lineDiff } from '../src/edit/diff';

interface ICase {
  instruction: string;
  source: string;
  language: string;
  prompt: string;
  prediction: string;
}

const contract = JSON.parse(
  readFileSync(resolve(__dirname, '../../tests/fixtures/edit_prompt.json'), 'utf8')
) as { stop: string[]; cases: ICase[] };

describe('editPrompt', () => {
  it('stops where the shared contract stops', () => {
    expect(EDIT_STOP).toEqual(contract.stop);
  });

  it.each(contract.cases)('builds the contract prompt and prediction: $instruction', c => {
    expect(editPrompt(c.instruction, c.source, c.language)).toEqual({
      prompt: c.prompt,
      prediction: c.prediction
    });
  });
});

describe('editedSource', () => {
  it('keeps the text before the stop, without its last newline', () => {
    expect(editedSource('a = 1\nb = 2\n```\nmore')).toBe('a = 1\nb = 2');
    expect(editedSource('a = 1\n\n')).toBe('a = 1\n');
    expect(editedSource('a = 1')).toBe('a = 1');
  });
});

describe('lineDiff', () => {
  it('marks removed and added lines around the common ones', () => {
    expect(lineDiff('x = 1\nprint(x)', 'count = 1\nprint(x)')).toEqual([
      { kind: 'removed', text: 'x = 1' },
      { kind: 'added', text: 'count = 1' },
      { kind: 'same', text: 'print(x)' }
    ]);
  });

  it('shows an unchanged source as unchanged lines', () => {
    expect(lineDiff('a\nb', 'a\nb').every(line => line.kind === 'same')).toBe(true);
  });
});
