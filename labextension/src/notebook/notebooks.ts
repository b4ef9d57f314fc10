/**
 * Answers back in their cells: when a notebook opens, the answers of its tasks that it does
 * not show go back into their cells (which ones: `restore.ts`), and the notebook is marked
 * changed so that a save keeps them. The MIME renderer then follows a running one live.
 * Answers a user clears on purpose (Clear Outputs, a re-run) are remembered so that they do
 * not come back: in this browser at once, and in the cell's metadata once saved.
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import type { ICellModel, ICodeCellModel } from '@jupyterlab/cells';
import { INotebookTracker, type NotebookPanel } from '@jupyterlab/notebook';
import type { IOutputModel } from '@jupyterlab/rendermime';
import type { PartialJSONObject } from '@lumino/coreutils';

import { listTasks } from '../protocol/api';
import { MIME_TYPE } from './mimetype';
import { DismissedAsks, planRestorations, type ICellSummary } from './restore';

/** How many of a notebook's newest tasks are looked at (the listing's maximum). */
const RECENT_TASKS = 100;
/** The cell metadata key under which a cleared ask is saved: `{"dismissed": ask_id}`. */
export const CELL_METADATA_KEY = 'lmsp';

function askIdOf(output: IOutputModel): string | null {
  const state = output.data[MIME_TYPE] as { ask_id?: unknown } | undefined;
  return typeof state?.ask_id === 'string' ? state.ask_id : null;
}

function codeCells(panel: NotebookPanel): ICodeCellModel[] {
  const cells = panel.content.model?.cells;
  const found: ICodeCellModel[] = [];
  for (let index = 0; index < (cells?.length ?? 0); index++) {
    const cell = cells!.get(index);
    if (cell.type === 'code') {
      found.push(cell as ICodeCellModel);
    }
  }
  return found;
}

function outputAskIds(cell: ICodeCellModel): (string | null)[] {
  const found = [];
  for (let index = 0; index < cell.outputs.length; index++) {
    found.push(askIdOf(cell.outputs.get(index)));
  }
  return found;
}

function askIds(cell: ICodeCellModel): string[] {
  return outputAskIds(cell).filter((askId): askId is string => askId !== null);
}

function summary(cell: ICodeCellModel): ICellSummary {
  const outputs = outputAskIds(cell).map(askId => ({ askId }));
  const saved = cell.getMetadata(CELL_METADATA_KEY) as { dismissed?: unknown } | undefined;
  return {
    id: cell.id,
    source: cell.sharedModel.getSource(),
    outputs,
    dismissed: typeof saved?.dismissed === 'string' ? saved.dismissed : null
  };
}

/** Restores one notebook's answers once it has loaded, and remembers the ones cleared. */
class NotebookAnswers {
  private _restoring = false;
  private readonly _watched = new WeakSet<ICodeCellModel>();

  constructor(
    private readonly _panel: NotebookPanel,
    private readonly _dismissed: DismissedAsks
  ) {}

  async start(): Promise<void> {
    await this._panel.context.ready;
    const model = this._panel.content.model;
    if (!model || this._panel.isDisposed) {
      return;
    }
    codeCells(this._panel).forEach(cell => this._watch(cell));
    model.cells.changed.connect((_, change) => change.newValues.forEach(c => this._watch(c)));
    await this._restore();
  }

  private async _restore(): Promise<void> {
    const notebook = this._panel.context.localPath;
    let tasks;
    try {
      tasks = await listTasks({ limit: RECENT_TASKS, metadata: { notebook } });
    } catch (error) {
      console.warn(`lmsp-jupyter: cannot list the tasks of ${notebook}:`, error);
      this._panel.node.dataset.lmspRestored = 'failed';
      return;
    }
    if (this._panel.isDisposed || !this._panel.content.model) {
      return;
    }
    const cells = new Map(codeCells(this._panel).map(cell => [cell.id, cell]));
    const plan = planRestorations(
      tasks,
      Array.from(cells.values(), summary),
      this._dismissed.all()
    );
    this._restoring = true;
    try {
      for (const { cellId, state, text } of plan) {
        const cell = cells.get(cellId)!;
        cell.outputs.clear();
        // Made here from the user's own server, as a run of the cell would: trusted like one
        // (so Stop works); the file's outputs, if any, were just cleared.
        cell.trusted = true;
        cell.outputs.add({
          output_type: 'display_data',
          data: { [MIME_TYPE]: state as unknown as PartialJSONObject, 'text/plain': text },
          metadata: {}
        });
      }
    } finally {
      this._restoring = false;
    }
    if (plan.length > 0) {
      this._panel.content.model.dirty = true;
    }
    // Says that the look-up is over (tests wait for it before checking what came back).
    this._panel.node.dataset.lmspRestored = String(plan.length);
  }

  private _watch(cell: ICellModel): void {
    if (cell.type !== 'code' || this._watched.has(cell as ICodeCellModel)) {
      return;
    }
    const code = cell as ICodeCellModel;
    this._watched.add(code);
    // The asks shown before each change: removed outputs are disposed before it is signalled.
    let shown = askIds(code);
    code.outputs.changed.connect(() => {
      const now = askIds(code);
      for (const askId of this._restoring ? [] : shown) {
        if (!now.includes(askId)) {
          this._dismissed.add(askId);
          code.setMetadata(CELL_METADATA_KEY, { dismissed: askId });
        }
      }
      shown = now;
    });
  }
}

/** Puts answers back into the cells of every notebook that opens. */
export const restorePlugin: JupyterFrontEndPlugin<void> = {
  id: 'lmsp-jupyter:restore',
  description: 'Puts LMSP answers back into their cells when a notebook opens without them.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker): void => {
    const dismissed = new DismissedAsks(window.localStorage);
    tracker.widgetAdded.connect((_, panel) => void new NotebookAnswers(panel, dismissed).start());
  }
};
