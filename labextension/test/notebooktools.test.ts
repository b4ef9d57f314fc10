import { YNotebook } from '@jupyter/ydoc';
import { describe, expect, it } from 'vitest';

import {
  MAX_OUTPUT_CHARS,
  outputsText,
  performNotebookCall,
  type INotebookHost,
  type IRunResult
} from '../src/notebook/tools';

/** A notebook of code cells with `sources` (JupyterLab's shared model); cell `asking` asks. */
function notebook(sources: string[], asking = 1): { host: INotebookHost; runs: number[] } {
  const document = YNotebook.create();
  document.insertCells(
    0,
    sources.map(source => ({ cell_type: 'code', source }))
  );
  const runs: number[] = [];
  const host: INotebookHost = {
    document,
    askingIndex: asking,
    run: (index: number): Promise<IRunResult> => {
      runs.push(index);
      const cell = document.cells[index];
      if (cell.cell_type === 'code') {
        cell.setOutputs([
          { output_type: 'stream', name: 'stdout', text: `ran ${index}\n` },
          {
            output_type: 'execute_result',
            execution_count: 7,
            metadata: {},
            data: { 'text/plain': '42', 'text/html': '<b>42</b>' }
          }
        ]);
      }
      return Promise.resolve({ status: 'ok', execution_count: 7 });
    }
  };
  return { host, runs };
}

function sources(host: INotebookHost): string[] {
  return host.document.cells.map(cell => cell.getSource());
}

const CELLS = ['import math', '%lmsp ask --notebook-tools fix it', 'x = 1', 'print(x)'];

describe('read_cell', () => {
  it('reads a cell by absolute index, outputs as text', async () => {
    const { host } = notebook(CELLS);
    const output = await performNotebookCall('read_cell', '{"index": 3}', host);
    expect(JSON.parse(output)).toEqual({
      index: 3,
      cell_type: 'code',
      source: 'print(x)',
      outputs: ''
    });
  });

  it('reads relative to the cell that asks', async () => {
    const { host } = notebook(CELLS);
    for (const [index, at] of [
      [-1, 0],
      [0, 1],
      [1, 2]
    ]) {
      const output = await performNotebookCall(
        'read_cell',
        JSON.stringify({ index, relative: true }),
        host
      );
      expect(JSON.parse(output)).toMatchObject({ index: at, source: CELLS[at] });
    }
  });

  it.each([
    ['{"index": 4}', 'error: there is no cell at index 4: the notebook has 4 cells, 0 to 3'],
    ['{"index": -1}', 'error: there is no cell at index -1: the notebook has 4 cells, 0 to 3'],
    [
      '{"index": -2, "relative": true}',
      'error: there is no cell at index -1: the notebook has 4 cells, 0 to 3'
    ],
    ['{"index": 1.5}', 'error: the arguments do not fit read_cell: index: should be an integer'],
    [
      '{"relative": "yes", "cell": 1}',
      'error: the arguments do not fit read_cell: index: required; ' +
        'relative: should be true or false; cell: not a parameter of read_cell'
    ],
    ['[1]', 'error: the arguments are not a JSON object: [1]']
  ])('refuses %s with a clear error', async (args, error) => {
    const { host } = notebook(CELLS);
    expect(await performNotebookCall('read_cell', args, host)).toBe(error);
  });

  it('says so when the notebook has no cells', async () => {
    const { host } = notebook([], -1);
    expect(await performNotebookCall('read_cell', '{"index": 0}', host)).toBe(
      'error: there is no cell at index 0: the notebook has no cells'
    );
  });

  it('refuses a relative index when the asking cell is not in the notebook', async () => {
    const { host } = notebook(CELLS, -1);
    expect(await performNotebookCall('read_cell', '{"index": 1, "relative": true}', host)).toBe(
      'error: the cell that asks is not in this notebook: use an absolute index'
    );
  });
});

describe('insert_cell', () => {
  it('inserts right below the asking cell by default, with exactly the source', async () => {
    const { host } = notebook(CELLS);
    const source = 'y = "é\\n"\nprint(y)';
    const output = await performNotebookCall('insert_cell', JSON.stringify({ source }), host);
    expect(JSON.parse(output)).toEqual({ index: 2, cell_type: 'code' });
    expect(sources(host)).toEqual([CELLS[0], CELLS[1], source, CELLS[2], CELLS[3]]);
  });

  it.each([
    [{ index: 0 }, 0],
    [{ index: 99 }, 4],
    [{ index: -5 }, 0],
    [{ index: null }, 2],
    [{ index: 0, relative: true }, 1],
    [{ index: 3, relative: true }, 4]
  ])('puts the cell where %j says, as list.insert does', async (where, at) => {
    const { host } = notebook(CELLS);
    const output = await performNotebookCall(
      'insert_cell',
      JSON.stringify({ source: 'new', ...where }),
      host
    );
    expect(JSON.parse(output).index).toBe(at);
    const expected = [...CELLS];
    expected.splice(at, 0, 'new');
    expect(sources(host)).toEqual(expected);
  });

  it('inserts a Markdown cell', async () => {
    const { host } = notebook(CELLS);
    await performNotebookCall(
      'insert_cell',
      '{"source": "# Title", "cell_type": "markdown"}',
      host
    );
    expect(host.document.cells[2].cell_type).toBe('markdown');
  });

  it('changes nothing when the arguments do not fit', async () => {
    const { host } = notebook(CELLS);
    expect(
      await performNotebookCall('insert_cell', '{"source": 3, "cell_type": "raw"}', host)
    ).toBe(
      'error: the arguments do not fit insert_cell: source: should be a string; ' +
        'cell_type: should be "code" or "markdown"'
    );
    expect(sources(host)).toEqual(CELLS);
  });
});

describe('replace_cell', () => {
  it("replaces a cell's source", async () => {
    const { host } = notebook(CELLS);
    const output = await performNotebookCall(
      'replace_cell',
      '{"index": 2, "source": "x = 2"}',
      host
    );
    expect(JSON.parse(output)).toEqual({ index: 2, cell_type: 'code' });
    expect(sources(host)).toEqual([CELLS[0], CELLS[1], 'x = 2', CELLS[3]]);
  });

  it('changes nothing for a cell that is not there', async () => {
    const { host } = notebook(CELLS);
    expect(await performNotebookCall('replace_cell', '{"index": 9, "source": "x = 2"}', host)).toBe(
      'error: there is no cell at index 9: the notebook has 4 cells, 0 to 3'
    );
    expect(sources(host)).toEqual(CELLS);
  });
});

describe('run_cell', () => {
  it('runs a code cell and gives its outputs as text', async () => {
    const { host, runs } = notebook(CELLS);
    const output = await performNotebookCall('run_cell', '{"index": 1, "relative": true}', host);
    expect(runs).toEqual([2]);
    expect(JSON.parse(output)).toEqual({
      index: 2,
      execution_count: 7,
      status: 'ok',
      outputs: 'ran 2\n42\n'
    });
  });

  it('does not run the cell that asks, nor a Markdown cell', async () => {
    const { host, runs } = notebook(CELLS);
    host.document.insertCell(4, { cell_type: 'markdown', source: '# Notes' });
    expect(await performNotebookCall('run_cell', '{"index": 1}', host)).toBe(
      'error: cell 1 is the cell that asks: it cannot run itself'
    );
    expect(await performNotebookCall('run_cell', '{"index": 4}', host)).toBe(
      'error: cell 4 is a markdown cell: only code cells run'
    );
    expect(runs).toEqual([]);
  });
});

describe('outputsText', () => {
  it('gives errors as their traceback without colours, other data by type', () => {
    expect(
      outputsText([
        {
          output_type: 'error',
          ename: 'ZeroDivisionError',
          evalue: 'division by zero',
          traceback: ['\u001b[0;31mZeroDivisionError\u001b[0m: division by zero']
        },
        { output_type: 'display_data', data: { 'image/png': 'iVBOR' } },
        { output_type: 'stream', text: ['one ', 'line'] }
      ])
    ).toBe('ZeroDivisionError: division by zero\n[image/png]\none line\n');
  });

  it('cuts long output with a marker', () => {
    const text = outputsText([{ output_type: 'stream', text: 'a'.repeat(MAX_OUTPUT_CHARS + 10) }]);
    expect(text).toBe(`${'a'.repeat(MAX_OUTPUT_CHARS)}\n[… 11 more characters of output left out]`);
  });
});

it('answers a name that is not a notebook tool with an error', async () => {
  const { host } = notebook(CELLS);
  expect(await performNotebookCall('delete_cell', '{}', host)).toBe(
    'error: there is no notebook tool named "delete_cell"'
  );
});
