/**
 * The plugin that registers the local models' inline completion provider: its settings are in
 * the Settings Editor under Inline Completer, provider "Local model (LMSP)".
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICompletionProviderManager } from '@jupyterlab/completer';
import { ITranslator } from '@jupyterlab/translation';

import { extensionBundle } from '../translation';
// eslint-disable-next-line jupyter/prefer-lazy-imports -- registerInlineProvider takes the provider at activation
import { LmspInlineProvider } from './provider';

/** Ghost text from the local model as you type in a notebook cell (JupyterLab 4.1+). */
export const inlinePlugin: JupyterFrontEndPlugin<void> = {
  id: 'lmsp-jupyter:inline-completions',
  description: 'Suggests code as you type, from a local model, as inline completions.',
  autoStart: true,
  requires: [ICompletionProviderManager],
  optional: [ITranslator],
  activate: (
    app: JupyterFrontEnd,
    manager: ICompletionProviderManager,
    translator: ITranslator | null
  ): void => {
    manager.registerInlineProvider(new LmspInlineProvider(extensionBundle(translator)));
  }
};
