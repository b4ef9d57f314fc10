/**
 * The notebook an answer's view is shown in, as the notebook tools need it
 * (`tools.ts`): its shared model, the asking cell's index, and a way to run a cell.
 */
import { CodeCell } from '@jupyterlab/cells';
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import type { INotebookHost, IRunResult } from './tools';

/** The notebook whose cell holds `node` (an output's renderer), or null if none does. */
export function notebookHost(
  tracker: INotebookTracker | null,
  node: HTMLElement
): INotebookHost | null {
  const panel = tracker?.find(candidate => candidate.content.node.contains(node)) ?? null;
  const document = panel?.content.model?.sharedModel;
  if (!panel || !document) {
    return null;
  }
  return {
    document,
    askingIndex: panel.content.widgets.findIndex(cell => cell.node.contains(node)),
    run: index => runCell(panel, index)
  };
}

/** Run a code cell as JupyterLab runs it (outputs and execution count in the cell). */
async function runCell(panel: NotebookPanel, index: number): Promise<IRunResult> {
  const cell = panel.content.widgets[index];
  if (!(cell instanceof CodeCell)) {
    throw new Error(`cell ${index} is not a code cell`);
  }
  const reply = await CodeCell.execute(cell, panel.sessionContext);
  const status = reply?.content.status;
  return {
    status: status === 'ok' || status === 'error' ? status : 'aborted',
    execution_count: cell.model.executionCount ?? null
  };
}
