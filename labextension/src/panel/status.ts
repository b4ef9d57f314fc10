/**
 * The LMSP status-bar item: the model in memory and whether one of the Jupyter user's tasks
 * is generating right now.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator, type TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { sharedMonitor, type IServiceSnapshot, type ServiceMonitor } from './monitor';
import { extensionBundle } from '../translation';
import '../../style/panel.css';

/** What the item shows. */
export interface ILmspStatus {
  /** The loaded model, or null when none is in memory. */
  model: string | null;
  /** Whether a task is in progress. */
  generating: boolean;
}

/** The status-bar widget: `.lmsp-statusbar` with `data-state="idle|generating"`. */
export class LmspStatusItem extends Widget {
  private readonly monitor: ServiceMonitor;
  private readonly unwatch: () => void;
  private readonly trans: TranslationBundle;

  constructor(
    trans: TranslationBundle = extensionBundle(),
    monitor: ServiceMonitor = sharedMonitor()
  ) {
    super();
    this.trans = trans;
    this.addClass('lmsp-statusbar');
    this.addClass('jp-StatusBar-TextItem');
    this.render({ model: null, generating: false });
    this.monitor = monitor;
    monitor.changed.connect(this.onSnapshot, this);
    monitor.failed.connect(this.onFailure, this);
    this.unwatch = monitor.watch(false);
  }

  private onSnapshot(_: ServiceMonitor, { models, generating }: IServiceSnapshot): void {
    const loaded = models.models.find(model => model.status === 'loaded');
    this.render({ model: loaded?.id ?? null, generating });
  }

  private onFailure(_: ServiceMonitor, reason: Error): void {
    this.node.dataset.state = 'unreachable';
    this.node.textContent = this.trans.__('LMSP: unreachable');
    this.node.title = reason.message;
  }

  /** Show a status. */
  render(status: ILmspStatus): void {
    const model = status.model ?? 'no model loaded';
    this.node.dataset.state = status.generating ? 'generating' : 'idle';
    this.toggleClass('lmsp-status-generating', status.generating);
    this.node.textContent = `LMSP: ${model} · ${status.generating ? '⟳ generating' : 'idle'}`;
    this.node.title = status.generating
      ? `A task is generating with the LMSP service (${model})`
      : `The LMSP service is idle (${model})`;
  }

  dispose(): void {
    this.unwatch();
    this.monitor.changed.disconnect(this.onSnapshot, this);
    this.monitor.failed.disconnect(this.onFailure, this);
    super.dispose();
  }
}

/** Adds the LMSP item to the status bar, when there is one. */
export const statusPlugin: JupyterFrontEndPlugin<void> = {
  id: 'lmsp-jupyter:status',
  description: 'A status-bar item showing the LMSP model and whether it is generating.',
  autoStart: true,
  optional: [IStatusBar, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    statusBar: IStatusBar | null,
    translator: ITranslator | null
  ): void => {
    if (statusBar === null) {
      return;
    }
    const trans = extensionBundle(translator);
    statusBar.registerStatusItem(statusPlugin.id, {
      item: new LmspStatusItem(trans),
      align: 'left',
      rank: 100
    });
  }
};
