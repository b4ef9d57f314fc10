/**
 * The cell actions' work: the "Explain" buttons under error outputs, and a cell's edit streamed
 * into a diff view under its input with Accept / Reject. Loaded by the plugin when first needed.
 */
import { InputDialog } from '@jupyterlab/apputils';
import type { Cell, CodeCell } from '@jupyterlab/cells';
import { NotebookActions, type NotebookPanel } from '@jupyterlab/notebook';
import type { TranslationBundle } from '@jupyterlab/translation';

import { completionsUrl, listModels, sessionFetch } from '../protocol/api';
import { pickModel } from '../inline/context';
import { completionTexts } from '../inline/provider';
import '../../style/cells.css';
import { lineDiff } from './diff';
import { EDIT_STOP, editedSource, editPrompt } from './prompt';

/** The source of the cell an "Explain" button inserts and runs. */
export const EXPLAIN_SOURCE = '%lmsp explain';
/** The longest new source, in tokens, beyond the old source's length in characters. */
const EDIT_EXTRA_TOKENS = 256;

/** Whether a code cell shows an error output. */
function hasError(cell: Cell): boolean {
  if (cell.model.type !== 'code') {
    return false;
  }
  const outputs = (cell as CodeCell).model.outputs;
  for (let index = 0; index < outputs.length; index++) {
    if (outputs.get(index).type === 'error') {
      return true;
    }
  }
  return false;
}

/** Adds or removes the "Explain" button under each code cell's outputs, as they change. */
export function syncExplainButtons(panel: NotebookPanel, trans: TranslationBundle): void {
  for (const cell of panel.content.widgets) {
    const wrapper =
      cell.model.type === 'code' ? (cell as CodeCell).outputArea.node.parentElement : null;
    if (wrapper === null) {
      continue;
    }
    const button = wrapper.querySelector(':scope > .lmsp-ExplainButton');
    if (hasError(cell) && button === null) {
      const explain = document.createElement('button');
      explain.className = 'jp-mod-styled lmsp-ExplainButton';
      explain.textContent = trans.__('Explain');
      explain.title = trans.__('Explain this error with the local model, in a new cell below');
      explain.addEventListener('click', () => void explainBelow(panel, cell));
      wrapper.appendChild(explain);
    } else if (!hasError(cell) && button !== null) {
      button.remove();
    }
  }
}

/** Inserts a `%lmsp explain` cell below `cell` and runs it. */
async function explainBelow(panel: NotebookPanel, cell: Cell): Promise<void> {
  const notebook = panel.content;
  notebook.activeCellIndex = notebook.widgets.indexOf(cell);
  NotebookActions.insertBelow(notebook);
  const inserted = notebook.activeCell;
  if (inserted === null) {
    return;
  }
  inserted.model.sharedModel.setSource(EXPLAIN_SOURCE);
  await NotebookActions.run(notebook, panel.sessionContext);
}

/** The edit view open on a cell: a new edit of the cell closes it. */
const openViews = new WeakMap<Cell, EditView>();

/** The diff view under a cell's input while its new source streams, then Accept / Reject. */
class EditView {
  readonly node = document.createElement('div');

  constructor(
    private readonly _cell: Cell,
    trans: TranslationBundle,
    private readonly _controller: AbortController
  ) {
    this.node.className = 'lmsp-EditDiff';
    this._lines.className = 'lmsp-EditDiff-lines';
    this._status.className = 'lmsp-EditDiff-status';
    this._accept.className = 'jp-mod-styled jp-mod-accept lmsp-EditDiff-accept';
    this._accept.textContent = trans.__('Accept');
    this._accept.disabled = true;
    this._reject.className = 'jp-mod-styled jp-mod-reject lmsp-EditDiff-reject';
    this._reject.textContent = trans.__('Reject');
    const actions = document.createElement('div');
    actions.className = 'lmsp-EditDiff-actions';
    actions.append(this._status, this._accept, this._reject);
    this.node.append(this._lines, actions);
    this._accept.addEventListener('click', () => this.close(true));
    this._reject.addEventListener('click', () => this.close(false));
    this._onKey = (event: KeyboardEvent) => {
      if (event.key === 'Escape') {
        this.close(false);
      }
    };
    document.addEventListener('keydown', this._onKey, true);
    openViews.get(_cell)?.close(false);
    openViews.set(_cell, this);
    _cell.inputArea?.node.parentElement?.after(this.node);
    this.show('');
  }

  /** The diff of the old source and `source`. */
  show(source: string): void {
    this._source = source;
    this._lines.replaceChildren(
      ...lineDiff(this._cell.model.sharedModel.getSource(), source).map(line => {
        const row = document.createElement('div');
        row.className = `lmsp-EditDiff-${line.kind}`;
        row.textContent = `${{ same: ' ', removed: '-', added: '+' }[line.kind]} ${line.text}`;
        return row;
      })
    );
  }

  /** The stream ended: `error` if it failed, else the new source can be accepted. */
  finish(error: string | null): void {
    this._status.textContent = error ?? '';
    this._accept.disabled = error !== null;
    this.node.classList.add('lmsp-mod-done');
  }

  /** Stop the request; put the new source in the cell if `accept` and it is complete. */
  close(accept: boolean): void {
    if (openViews.get(this._cell) === this) {
      openViews.delete(this._cell);
    }
    this._controller.abort();
    document.removeEventListener('keydown', this._onKey, true);
    if (accept && !this._accept.disabled) {
      // one transaction: a single undo in the cell editor restores the old source
      this._cell.model.sharedModel.setSource(this._source);
    }
    this.node.remove();
  }

  private readonly _lines = document.createElement('div');
  private readonly _status = document.createElement('span');
  private readonly _accept = document.createElement('button');
  private readonly _reject = document.createElement('button');
  private readonly _onKey: (event: KeyboardEvent) => void;
  private _source = '';
}

/** Asks for an instruction and streams the edit of `cell` into a diff view. */
export async function editCell(
  panel: NotebookPanel,
  cell: Cell,
  trans: TranslationBundle
): Promise<void> {
  const asked = await InputDialog.getText({
    title: trans.__('Edit cell with LMSP…'),
    label: trans.__('Instruction'),
    placeholder: trans.__('e.g. add a docstring')
  });
  const instruction = asked.value?.trim() ?? '';
  if (!asked.button.accept || !instruction) {
    return;
  }
  const source = cell.model.sharedModel.getSource();
  const language =
    cell.model.type === 'markdown'
      ? 'markdown'
      : (panel.content.model?.defaultKernelLanguage ?? 'python');
  const { prompt, prediction } = editPrompt(instruction, source, language);
  const controller = new AbortController();
  const view = new EditView(cell, trans, controller);
  let generated = '';
  try {
    const model = pickModel((await listModels()).models, '');
    if (model === null) {
      throw new Error(trans.__('No model is available.'));
    }
    const response = await sessionFetch(completionsUrl(), {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        model,
        prompt,
        prediction: { type: 'content', content: prediction },
        max_tokens: source.length + EDIT_EXTRA_TOKENS,
        temperature: 0,
        stop: EDIT_STOP,
        stream: true
      }),
      signal: controller.signal
    });
    if (!response.ok || response.body === null) {
      const problem = await response.json().catch(() => null);
      throw new Error(problem?.detail ?? `${response.status} ${response.statusText}`);
    }
    for await (const text of completionTexts(response.body, controller.signal)) {
      generated += text;
      view.show(editedSource(generated));
    }
    view.show(editedSource(generated));
    view.finish(null);
  } catch (error) {
    if (!controller.signal.aborted) {
      view.finish(String((error as Error).message ?? error));
    }
  }
}
