import { describe, expect, it } from 'vitest';

import type { ILmspTask, IResponse } from '../src/protocol/types';
import {
  DismissedAsks,
  planRestorations,
  sourceHash,
  type ICellSummary
} from '../src/notebook/restore';

const SOURCE = '%lmsp ask --max-tokens 8 Once upon a time';

function result(text: string, status: IResponse['status'] = 'completed'): IResponse {
  return {
    id: 'resp_x',
    status,
    model: 'gemma3:270m-q4_k_m',
    output: [
      { type: 'message', id: 'msg_x', role: 'assistant', content: [{ type: 'output_text', text }] }
    ]
  };
}

function task(
  id: string,
  metadata: Record<string, string>,
  status: ILmspTask['status'] = 'completed',
  text = 'a story'
): ILmspTask {
  const final = status !== 'queued' && status !== 'in_progress';
  return {
    id,
    status,
    created_at: 1,
    started_at: 1,
    completed_at: final ? 2 : null,
    result: final ? result(text, status as IResponse['status']) : null,
    metadata: { notebook: 'n.ipynb', source_hash: sourceHash(SOURCE), kernel: 'k1', ...metadata }
  };
}

function cell(overrides: Partial<ICellSummary> = {}): ICellSummary {
  return { id: 'c1', source: SOURCE, outputs: [], dismissed: null, ...overrides };
}

describe('sourceHash', () => {
  // The same vectors as tests/kernel/test_origin.py: the kernel hashes what the cell ran.
  it.each([
    ['', 'cbf29ce484222325'],
    ['a', 'af63dc4c8601ec8c'],
    ['foobar', '85944171f73967e8'],
    ['%lmsp ask Once upon a time\nprint("é→✓")', '7c002b13d252ae49']
  ])('is FNV-1a 64 of the UTF-8 source: %j', (source, hash) => {
    expect(sourceHash(source)).toBe(hash);
  });
});

describe('planRestorations', () => {
  it('puts a running ask into its empty cell, live, with the kernel that asked', () => {
    const plan = planRestorations(
      [task('task_2', { cell: 'c1', ask: 'ask_1' }, 'in_progress')],
      [cell()],
      new Set()
    );
    expect(plan).toEqual([
      {
        cellId: 'c1',
        state: {
          version: 1,
          ask_id: 'ask_1',
          kernel_id: 'k1',
          model: '',
          status: 'in_progress',
          rounds: [{ task_id: 'task_2', response: null }],
          tool_calls: {},
          error: null
        },
        text: '[in_progress] task_2'
      }
    ]);
  });

  it('puts a finished ask back final, its rounds oldest first', () => {
    const tasks = [
      task('task_3', { cell: 'c1', ask: 'ask_1' }, 'incomplete', 'the end'),
      task('task_2', { cell: 'c1', ask: 'ask_1' })
    ];
    const [restored] = planRestorations(tasks, [cell()], new Set());
    expect(restored.state.status).toBe('incomplete');
    expect(restored.state.model).toBe('gemma3:270m-q4_k_m');
    expect(restored.state.rounds.map(round => round.task_id)).toEqual(['task_2', 'task_3']);
    expect(restored.text).toBe('the end\n[incomplete] task_3');
  });

  it('puts an ask whose last round ended with calls back waiting for their decision', () => {
    const called = task('task_2', { cell: 'c1', ask: 'ask_1' });
    called.result!.output = [
      {
        type: 'function_call',
        id: 'fc_1',
        call_id: 'call_1',
        name: 'weather',
        arguments: '{"city": "Paris"}'
      }
    ];
    const [restored] = planRestorations([called], [cell()], new Set());
    expect(restored.state.status).toBe('requires_action');
    expect(restored.state.tool_calls).toEqual({
      call_1: { name: 'weather', arguments: '{"city": "Paris"}', decision: 'pending', output: null }
    });
    expect(restored.text).toBe('[requires_action] task_2');
    // a round after the calls: they were decided, and the ask went on
    const next = task('task_3', { cell: 'c1', ask: 'ask_1' }, 'completed', 'Sunny.');
    const [went] = planRestorations([next, called], [cell()], new Set());
    expect(went.state.status).toBe('completed');
    expect(went.state.tool_calls).toEqual({});
  });

  it('does not wait for calls of a round that did not complete', () => {
    const cut = task('task_2', { cell: 'c1', ask: 'ask_1' }, 'incomplete');
    cut.result!.output = [
      { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: 'weather', arguments: '{' }
    ];
    const [restored] = planRestorations([cut], [cell()], new Set());
    expect(restored.state.status).toBe('incomplete');
    expect(restored.state.tool_calls).toEqual({});
  });

  it('restores only the newest ask of a cell, each cell its own', () => {
    const tasks = [
      task('task_4', { cell: 'c2', ask: 'ask_3' }),
      task('task_3', { cell: 'c1', ask: 'ask_2' }),
      task('task_2', { cell: 'c1', ask: 'ask_1' })
    ];
    const plan = planRestorations(tasks, [cell(), cell({ id: 'c2' })], new Set());
    expect(plan.map(r => [r.cellId, r.state.ask_id])).toEqual([
      ['c1', 'ask_2'],
      ['c2', 'ask_3']
    ]);
  });

  it('replaces an older answer of the same cell, never a newer or another output', () => {
    const tasks = [
      task('task_3', { cell: 'c1', ask: 'ask_2' }),
      task('task_2', { cell: 'c1', ask: 'ask_1' })
    ];
    const plan = (outputs: ICellSummary['outputs']) =>
      planRestorations(tasks, [cell({ outputs })], new Set()).map(r => r.state.ask_id);
    expect(plan([{ askId: 'ask_1' }])).toEqual(['ask_2']);
    expect(plan([{ askId: 'ask_2' }])).toEqual([]); // already shown
    expect(plan([{ askId: 'ask_9' }])).toEqual([]); // an answer the listing does not know
    expect(plan([{ askId: null }])).toEqual([]); // a print, an error, a plot
    expect(plan([{ askId: 'ask_1' }, { askId: null }])).toEqual([]);
  });

  it('leaves a cell whose source changed, a cleared ask, and cells it does not know', () => {
    const tasks = [task('task_2', { cell: 'c1', ask: 'ask_1' })];
    expect(planRestorations(tasks, [cell({ source: SOURCE + ' ' })], new Set())).toEqual([]);
    expect(planRestorations(tasks, [cell()], new Set(['ask_1']))).toEqual([]);
    expect(planRestorations(tasks, [cell({ dismissed: 'ask_1' })], new Set())).toEqual([]);
    expect(planRestorations(tasks, [cell({ id: 'c9' })], new Set())).toEqual([]);
    const noCell = [task('task_2', { ask: 'ask_1' })];
    expect(planRestorations(noCell, [cell()], new Set())).toEqual([]);
  });

  it('does not fall back to an older ask when the newest is not restored', () => {
    const tasks = [
      task('task_3', { cell: 'c1', ask: 'ask_2' }),
      task('task_2', { cell: 'c1', ask: 'ask_1' })
    ];
    expect(planRestorations(tasks, [cell()], new Set(['ask_2']))).toEqual([]);
  });
});

describe('DismissedAsks', () => {
  function storage(): Pick<Storage, 'getItem' | 'setItem'> {
    const items = new Map<string, string>();
    return {
      getItem: key => items.get(key) ?? null,
      setItem: (key, value) => void items.set(key, value)
    };
  }

  it('remembers cleared asks and forgets them once their tasks are gone', () => {
    let now = 1000;
    const store = storage();
    const dismissed = new DismissedAsks(store, () => now);
    dismissed.add('ask_1');
    expect(new DismissedAsks(store, () => now).all()).toEqual(new Set(['ask_1']));
    now += DismissedAsks.KEEP_SECONDS;
    dismissed.add('ask_2');
    expect(dismissed.all()).toEqual(new Set(['ask_2']));
  });

  it('reads broken storage as nothing dismissed', () => {
    const store = storage();
    store.setItem(DismissedAsks.KEY, 'not json');
    expect(new DismissedAsks(store).all()).toEqual(new Set());
    expect(new DismissedAsks(null).all()).toEqual(new Set());
  });
});
