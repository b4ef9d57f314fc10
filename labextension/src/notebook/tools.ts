/**
 * Notebook tools (`lmsp_jupyter/kernel/notebook_tools.py`): what JupyterLab does on its
 * notebook when the user approves a model's `read_cell`, `insert_cell`, `replace_cell` or
 * `run_cell` call in the asking cell's output. The result is the text the kernel gives the
 * model as the call's output: a JSON object, or `error: ...` when the call cannot be done, in
 * which case nothing has changed.
 *
 * Cells are addressed by `index`: from 0, the first cell; with `relative: true`, counted
 * from the cell that asks (-1 the cell above it, 1 the one below).
 */

/** Output texts longer than this are cut, with a marker saying how much was left out. */
export const MAX_OUTPUT_CHARS = 4000;

/** The tools this module performs, by the names the kernel offers them under. */
export const NOTEBOOK_TOOLS: ReadonlySet<string> = new Set([
  'read_cell',
  'insert_cell',
  'replace_cell',
  'run_cell'
]);

/** An output of a code cell (nbformat), as far as its text is concerned. */
export interface ICellOutput {
  output_type: string;
  text?: unknown;
  data?: unknown;
  ename?: unknown;
  evalue?: unknown;
  traceback?: unknown;
}

/** The part of a cell's shared model (`ISharedCell`) the tools use. */
export interface ICellDocument {
  readonly cell_type: string;
  getSource(): string;
  setSource(source: string): void;
  /** A code cell's outputs. */
  getOutputs?(): ICellOutput[];
}

/** The part of a notebook's shared model (`ISharedNotebook`) the tools use. */
export interface INotebookDocument {
  readonly cells: readonly ICellDocument[];
  insertCell(index: number, cell: { cell_type: 'code' | 'markdown'; source: string }): unknown;
}

/** How a cell's execution ended. */
export interface IRunResult {
  status: 'ok' | 'error' | 'aborted';
  execution_count: number | null;
}

/** The notebook an approval was given in. */
export interface INotebookHost {
  readonly document: INotebookDocument;
  /** The index of the cell that asks (whose output shows the approval); -1 if unknown. */
  readonly askingIndex: number;
  /** Run the code cell at `index` in the notebook's kernel, once its execution ends. */
  run(index: number): Promise<IRunResult>;
}

type Value = 'integer' | 'integer_or_null' | 'boolean' | 'string' | 'cell_type';

/** Each tool's parameters, as the kernel's JSON Schemas give them, and which are required. */
const PARAMETERS: Record<string, { types: Record<string, Value>; required: string[] }> = {
  read_cell: { types: { index: 'integer', relative: 'boolean' }, required: ['index'] },
  insert_cell: {
    types: {
      source: 'string',
      index: 'integer_or_null',
      relative: 'boolean',
      cell_type: 'cell_type'
    },
    required: ['source']
  },
  replace_cell: {
    types: { index: 'integer', source: 'string', relative: 'boolean' },
    required: ['index', 'source']
  },
  run_cell: { types: { index: 'integer', relative: 'boolean' }, required: ['index'] }
};

class CallError extends Error {}

function fits(value: unknown, type: Value): boolean {
  switch (type) {
    case 'integer':
      return Number.isInteger(value);
    case 'integer_or_null':
      return value === null || Number.isInteger(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'string':
      return typeof value === 'string';
    case 'cell_type':
      return value === 'code' || value === 'markdown';
  }
}

const DESCRIBED: Record<Value, string> = {
  integer: 'an integer',
  integer_or_null: 'an integer or null',
  boolean: 'true or false',
  string: 'a string',
  cell_type: '"code" or "markdown"'
};

/** The call's arguments, checked against the tool's parameters. */
function parseArguments(name: string, text: string): Record<string, unknown> {
  const { types, required } = PARAMETERS[name];
  let values: unknown;
  try {
    values = JSON.parse(text);
  } catch (error) {
    throw new CallError(`the arguments are not valid JSON: ${(error as Error).message}`);
  }
  if (typeof values !== 'object' || values === null || Array.isArray(values)) {
    throw new CallError(`the arguments are not a JSON object: ${text}`);
  }
  const given = values as Record<string, unknown>;
  const problems = [
    ...required.filter(key => !(key in given)).map(key => `${key}: required`),
    ...Object.entries(given).map(([key, value]) =>
      !(key in types)
        ? `${key}: not a parameter of ${name}`
        : fits(value, types[key])
          ? ''
          : `${key}: should be ${DESCRIBED[types[key]]}`
    )
  ].filter(Boolean);
  if (problems.length) {
    throw new CallError(`the arguments do not fit ${name}: ${problems.join('; ')}`);
  }
  return given;
}

/** The absolute index that `index` and `relative` name (the cell need not exist). */
function position(host: INotebookHost, index: number, relative: boolean): number {
  if (!relative) {
    return index;
  }
  if (host.askingIndex < 0) {
    throw new CallError('the cell that asks is not in this notebook: use an absolute index');
  }
  return host.askingIndex + index;
}

/** The index of an existing cell that `index` and `relative` name. */
function existing(host: INotebookHost, index: number, relative: boolean): number {
  const at = position(host, index, relative);
  const count = host.document.cells.length;
  if (at < 0 || at >= count) {
    const cells = count === 0 ? 'no cells' : `${count} cells, 0 to ${count - 1}`;
    throw new CallError(`there is no cell at index ${at}: the notebook has ${cells}`);
  }
  return at;
}

function joined(text: unknown): string {
  return Array.isArray(text) ? text.join('') : typeof text === 'string' ? text : '';
}

/** Text without ANSI escape sequences (tracebacks are coloured). */
function plain(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/\u001b\[[0-9;]*[A-Za-z]/g, '');
}

function outputText(output: ICellOutput): string {
  switch (output.output_type) {
    case 'stream':
      return joined(output.text);
    case 'error':
      return plain(
        joined((output.traceback as string[] | undefined)?.join('\n')) ||
          `${joined(output.ename)}: ${joined(output.evalue)}`
      );
    default: {
      const data = (output.data ?? {}) as Record<string, unknown>;
      if ('text/plain' in data) {
        return joined(data['text/plain']);
      }
      const types = Object.keys(data);
      return types.length ? `[${types[0]}]` : '';
    }
  }
}

/** A cell's outputs as one text, cut after `MAX_OUTPUT_CHARS` with a visible marker. */
export function outputsText(outputs: readonly ICellOutput[]): string {
  const text = outputs
    .map(outputText)
    .map(part => (part.endsWith('\n') || part === '' ? part : `${part}\n`))
    .join('');
  if (text.length <= MAX_OUTPUT_CHARS) {
    return text;
  }
  const left = text.length - MAX_OUTPUT_CHARS;
  return `${text.slice(0, MAX_OUTPUT_CHARS)}\n[… ${left} more characters of output left out]`;
}

async function perform(
  name: string,
  given: Record<string, unknown>,
  host: INotebookHost
): Promise<Record<string, unknown>> {
  const relative = given.relative === true;
  const cells = host.document.cells;
  switch (name) {
    case 'read_cell': {
      const at = existing(host, given.index as number, relative);
      const cell = cells[at];
      return {
        index: at,
        cell_type: cell.cell_type,
        source: cell.getSource(),
        outputs: outputsText(cell.getOutputs?.() ?? [])
      };
    }
    case 'insert_cell': {
      const wanted =
        typeof given.index === 'number'
          ? position(host, given.index, relative)
          : host.askingIndex < 0
            ? cells.length
            : host.askingIndex + 1;
      const at = Math.min(Math.max(wanted, 0), cells.length); // as Python's list.insert
      const cellType = given.cell_type === 'markdown' ? 'markdown' : 'code';
      host.document.insertCell(at, { cell_type: cellType, source: given.source as string });
      return { index: at, cell_type: cellType };
    }
    case 'replace_cell': {
      const at = existing(host, given.index as number, relative);
      cells[at].setSource(given.source as string);
      return { index: at, cell_type: cells[at].cell_type };
    }
    default: {
      const at = existing(host, given.index as number, relative);
      if (at === host.askingIndex) {
        throw new CallError(`cell ${at} is the cell that asks: it cannot run itself`);
      }
      if (cells[at].cell_type !== 'code') {
        throw new CallError(`cell ${at} is a ${cells[at].cell_type} cell: only code cells run`);
      }
      const ended = await host.run(at);
      return {
        index: at,
        execution_count: ended.execution_count,
        status: ended.status,
        outputs: outputsText(host.document.cells[at]?.getOutputs?.() ?? [])
      };
    }
  }
}

/**
 * Perform an approved call of notebook tool `name` with the model's JSON `argumentsText`;
 * the call's output. A call that cannot be done changes nothing and says why.
 */
export async function performNotebookCall(
  name: string,
  argumentsText: string,
  host: INotebookHost
): Promise<string> {
  if (!NOTEBOOK_TOOLS.has(name)) {
    return `error: there is no notebook tool named ${JSON.stringify(name)}`;
  }
  try {
    return JSON.stringify(await perform(name, parseArguments(name, argumentsText), host));
  } catch (error) {
    if (error instanceof CallError) {
      return `error: ${error.message}`;
    }
    return `error: ${name} failed: ${String(error)}`;
  }
}
