/**
 * The plugin that registers the local models' inline completion provider: its settings are in
 * the Settings Editor under Inline Completer, provider "Local model (LMSP)".
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICompletionProviderManager } from '@jupyterlab/completer';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ITranslator } from '@jupyterlab/translation';

import { extensionBundle } from '../translation';
// eslint-disable-next-line jupyter/prefer-lazy-imports -- registerInlineProvider takes the provider at activation
import { LmspInlineProvider } from './provider';
import { suggestOnNewLine } from './newline';

/** Ghost text from the local model as you type in a notebook cell (JupyterLab 4.1+). */
export const inlinePlugin: JupyterFrontEndPlugin<void> = {
  id: 'lmsp-jupyter:inline-completions',
  description: 'Suggests code as you type, from a local model, as inline completions.',
  autoStart: true,
  requires: [ICompletionProviderManager],
  optional: [INotebookTracker, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    manager: ICompletionProviderManager,
    notebooks: INotebookTracker | null,
    translator: ITranslator | null
  ): void => {
    const provider = new LmspInlineProvider(extensionBundle(translator));
    manager.registerInlineProvider(provider);
    if (notebooks) {
      suggestOnNewLine(notebooks, app.commands, () => provider.settings);
    }
  }
};
