/**
 * Cell actions from the local model: "Edit cell with LMSP…" (cell toolbar and command palette)
 * streams a cell's new source as a diff over the old one, to accept or reject; and an error
 * output gets an "Explain" button that runs `%lmsp explain` in a new cell below, through the
 * kernel, where the user's variables are.
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';
import { ITranslator } from '@jupyterlab/translation';
import { editIcon } from '@jupyterlab/ui-components';

import { extensionBundle } from '../translation';

/** The command that edits the active cell. */
export const EDIT_COMMAND = 'lmsp-jupyter:edit-cell';

/** The actions' module, loaded once when first needed. */
const actions = () => import('./actions');

/** The "Explain" button on error outputs and the "Edit cell with LMSP…" command. */
export const cellActionsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'lmsp-jupyter:cell-actions',
  description: 'Edits a cell with the local model and explains an error output.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    notebooks: INotebookTracker,
    palette: ICommandPalette | null,
    translator: ITranslator | null
  ): void => {
    const trans = extensionBundle(translator);
    app.commands.addCommand(EDIT_COMMAND, {
      label: trans.__('Edit cell with LMSP…'),
      caption: trans.__('Rewrite this cell by an instruction, with the local model'),
      describedBy: {
        args: { type: 'object', properties: { toolbar: { type: 'boolean' } } }
      },
      icon: args => (args.toolbar ? editIcon : undefined),
      isEnabled: () => notebooks.activeCell !== null,
      execute: () => {
        const panel = notebooks.currentWidget;
        const cell = notebooks.activeCell;
        if (panel !== null && cell !== null) {
          return actions().then(({ editCell }) => editCell(panel, cell, trans));
        }
      }
    });
    palette?.addItem({ command: EDIT_COMMAND, category: trans.__('Notebook Cell Operations') });
    notebooks.widgetAdded.connect((_, panel) => {
      const sync = () =>
        void actions().then(({ syncExplainButtons }) => syncExplainButtons(panel, trans));
      panel.content.modelContentChanged.connect(sync);
      void panel.revealed.then(sync);
    });
    NotebookActions.executed.connect((_, { notebook }) => {
      const panel = notebooks.find(candidate => candidate.content === notebook);
      if (panel !== undefined) {
        void actions().then(({ syncExplainButtons }) => syncExplainButtons(panel, trans));
      }
    });
  }
};
