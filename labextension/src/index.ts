/**
 * The lmsp-jupyter JupyterLab extension: its plugins, in one list.
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';

import { KernelMessenger } from './kernel';
import { taskRendererFactory } from './mime';
import { restorePlugin } from './notebooks';
import { panelPlugin } from './panel';
import { statusPlugin } from './status';

/** Shows every `%lmsp ask` output (application/vnd.lmsp.task+json), live while it runs. */
export const mimePlugin: JupyterFrontEndPlugin<void> = {
  id: 'lmsp-jupyter:mime',
  description: 'Renders LMSP answers in outputs and follows running tasks from the browser.',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  activate: (app: JupyterFrontEnd, rendermime: IRenderMimeRegistry): void => {
    const messenger = new KernelMessenger(app.serviceManager.kernels);
    rendermime.addFactory(taskRendererFactory(messenger));
  }
};

const plugins: JupyterFrontEndPlugin<any>[] = [
  mimePlugin,
  restorePlugin,
  panelPlugin,
  statusPlugin
];

export default plugins;
