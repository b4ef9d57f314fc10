/**
 * The lmsp-jupyter JupyterLab extension: its plugins, in one list.
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ITranslator } from '@jupyterlab/translation';

import { cellActionsPlugin } from './edit/plugin';
import { inlinePlugin } from './inline/plugin';
import { KernelMessenger } from './notebook/kernel';
// eslint-disable-next-line jupyter/prefer-lazy-imports -- activate() registers the renderer factory, whose createRenderer returns the renderer synchronously
import { taskRendererFactory } from './notebook/mime';
import { restorePlugin } from './notebook/notebooks';
import { panelPlugin } from './panel/panel';
import { statusPlugin } from './panel/status';
import { extensionBundle } from './translation';

/** Shows every `%lmsp ask` output (application/vnd.lmsp.task+json), live while it runs. */
export const mimePlugin: JupyterFrontEndPlugin<void> = {
  id: 'lmsp-jupyter:mime',
  description: 'Renders LMSP answers in outputs and follows running tasks from the browser.',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [ITranslator, INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    rendermime: IRenderMimeRegistry,
    translator: ITranslator | null,
    notebooks: INotebookTracker | null
  ): void => {
    const trans = extensionBundle(translator);
    const messenger = new KernelMessenger(app.serviceManager.kernels);
    // the notebook tracker: approved notebook tools' calls act on the asking cell's notebook
    rendermime.addFactory(taskRendererFactory(messenger, trans, notebooks));
  }
};

const plugins: JupyterFrontEndPlugin<any>[] = [
  mimePlugin,
  restorePlugin,
  panelPlugin,
  statusPlugin,
  inlinePlugin,
  cellActionsPlugin
];

export default plugins;
