/**
 * The LMSP side panel: the models on this machine (loading, loaded with their memory and the
 * time until they are unloaded when idle, a Load or Unload button), the Jupyter user's
 * recent tasks, with a Cancel button for each task that is still queued or running, and the
 * MCP servers the service runs for `--mcp` (their state, a failed one's error, their tools).
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ITranslator, type TranslationBundle } from '@jupyterlab/translation';
import { LabIcon } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { cancelTask, changeModel } from '../protocol/api';
import { McpServerList } from './mcpservers';
import { formatBytes, modelDetails, taskRate } from './models';
import { sharedMonitor, type IServiceSnapshot, type ServiceMonitor } from './monitor';
import { listRow, rowsOrEmpty } from './panelrows';
import { isRunning, type ILmspModel, type ILmspModels, type ILmspTask } from '../protocol/types';
import { element } from '../render/dom';
import { extensionBundle } from '../translation';
import '../../style/panel.css';

const SHOW_LOADING_MS = 250;

/** The panel's tab icon: a chip with a spark. */
export const lmspIcon = new LabIcon({
  name: 'lmsp-jupyter:lmsp',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<path d="M7 4h10a3 3 0 0 1 3 3v10a3 3 0 0 1-3 3H7a3 3 0 0 1-3-3V7a3 3 0 0 1 3-3zm0 2a1 1 0 0 0-1 1v10a1 1 0 0 0 1 1h10a1 1 0 0 0 1-1V7a1 1 0 0 0-1-1z"/>' +
    '<path d="M12 7.5l1.2 3.3 3.3 1.2-3.3 1.2-1.2 3.3-1.2-3.3-3.3-1.2 3.3-1.2z"/>' +
    '</g></svg>'
});

/** `4 min 05 s`, `12 s`: a duration the way a countdown shows it. */
export function formatDuration(seconds: number): string {
  const whole = Math.max(0, Math.round(seconds));
  if (whole < 60) {
    return `${whole} s`;
  }
  const minutes = Math.floor(whole / 60);
  if (minutes < 60) {
    return `${minutes} min ${String(whole % 60).padStart(2, '0')} s`;
  }
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, '0')} min`;
}

/** When a loaded model goes: `unloads in 4 min 05 s if idle`, or that it stays. */
export function expiryText(expiresAt: number | null | undefined, nowSeconds: number): string {
  if (expiresAt === null || expiresAt === undefined) {
    return 'stays loaded';
  }
  const left = expiresAt - nowSeconds;
  return left > 0 ? `unloads in ${formatDuration(left)} if idle` : 'unloading';
}

/** The side panel widget; it polls only while it is visible. */
export class LmspPanel extends Widget {
  private readonly modelList = element('ul', 'lmsp-panel-models');
  private readonly notices = element('ul', 'lmsp-panel-notices');
  private readonly taskList = element('ul', 'lmsp-panel-tasks');
  private readonly mcpServers: McpServerList;
  private readonly error = element('div', 'lmsp-panel-error');
  private readonly monitor: ServiceMonitor;
  private readonly trans: TranslationBundle;
  private unwatch: (() => void) | null = null;
  // The JSON last rendered, so an unchanged poll leaves the DOM (and hover, focus) alone.
  private shown = { models: '', tasks: '' };

  constructor(
    trans: TranslationBundle = extensionBundle(),
    monitor: ServiceMonitor = sharedMonitor()
  ) {
    super();
    this.trans = trans;
    this.monitor = monitor;
    monitor.changed.connect(this.onSnapshot, this);
    monitor.failed.connect(this.onFailure, this);
    this.id = 'lmsp-panel';
    this.addClass('lmsp-panel');
    this.title.icon = lmspIcon;
    this.title.caption = trans.__('LMSP');
    this.mcpServers = new McpServerList(trans);
    const header = element('div', 'lmsp-panel-header');
    header.append(element('h2', 'lmsp-panel-title', trans.__('LMSP')));
    const refresh = element('button', 'jp-Button jp-mod-minimal lmsp-panel-refresh', '⟳');
    refresh.title = trans.__('Refresh');
    refresh.addEventListener('click', () => void this.refresh());
    header.append(refresh);
    this.node.append(
      header,
      this.error,
      element('h3', 'lmsp-panel-section', trans.__('Models')),
      this.notices,
      this.modelList,
      element('h3', 'lmsp-panel-section', trans.__('Tasks')),
      this.taskList,
      this.mcpServers.node
    );
  }

  /** Fetch models and tasks now and show them (errors are shown in the panel). */
  async refresh(): Promise<void> {
    await this.monitor.refresh();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.unwatch ??= this.monitor.watch(true);
  }

  protected onBeforeHide(msg: Message): void {
    super.onBeforeHide(msg);
    this.stopWatching();
  }

  dispose(): void {
    this.stopWatching();
    this.monitor.changed.disconnect(this.onSnapshot, this);
    this.monitor.failed.disconnect(this.onFailure, this);
    super.dispose();
  }

  private stopWatching(): void {
    this.unwatch?.();
    this.unwatch = null;
  }

  private onSnapshot(_: ServiceMonitor, { models, recent, mcpServers }: IServiceSnapshot): void {
    if (recent === null || !this.isVisible) {
      return; // a poll for the status bar alone, or the panel is hidden
    }
    this.error.textContent = '';
    this.showModels(models);
    this.showTasks(recent);
    this.mcpServers.show(mcpServers);
    this.showCountdowns();
  }

  private onFailure(_: ServiceMonitor, reason: Error): void {
    this.error.textContent = `Cannot reach the LMSP service: ${reason.message}`;
  }

  private showModels({ models, notices }: ILmspModels): void {
    const json = JSON.stringify([models, notices]);
    if (json === this.shown.models) {
      return;
    }
    this.shown.models = json;
    this.notices.replaceChildren(
      ...notices.map(notice => element('li', 'lmsp-panel-notice', notice))
    );
    this.modelList.replaceChildren(
      ...rowsOrEmpty(
        models.map(model => this.modelRow(model)),
        this.trans.__('No models')
      )
    );
  }

  /** The time left of each loaded model moves with the clock, not with the listing. */
  private showCountdowns(): void {
    const now = Date.now() / 1000;
    for (const node of this.modelList.querySelectorAll<HTMLElement>('.lmsp-panel-expiry')) {
      const expires = node.dataset.expiresAt;
      node.textContent = expiryText(expires ? Number(expires) : null, now);
    }
  }

  private modelRow(model: ILmspModel): HTMLLIElement {
    const { row, line } = listRow('model', model.id, model.status);
    if (model.status === 'loaded' || model.status === 'available') {
      const change = model.status === 'loaded' ? 'unload' : 'load';
      const button = element(
        'button',
        `jp-Button jp-mod-styled jp-mod-minimal lmsp-panel-${change}`,
        change === 'load' ? this.trans.__('Load') : this.trans.__('Unload')
      );
      button.title =
        change === 'load'
          ? this.trans.__('Load this model now')
          : this.trans.__('Free the memory this model takes');
      button.addEventListener('click', () => void this.change(model.id, change, button));
      line.append(button);
    }
    row.append(line, element('div', 'lmsp-panel-details', modelDetails(model).join(' · ')));
    if (model.status === 'loaded') {
      const memory = element('div', 'lmsp-panel-memory');
      memory.append(`${formatBytes(model.memory_bytes ?? 0)} in memory · `);
      const expiry = element('span', 'lmsp-panel-expiry');
      if (model.expires_at !== null && model.expires_at !== undefined) {
        expiry.dataset.expiresAt = String(model.expires_at);
      }
      expiry.textContent = expiryText(model.expires_at, Date.now() / 1000);
      memory.append(expiry);
      row.append(memory);
    }
    const loading = model.extensions?.['x-lmsp-jupyter']?.loading;
    if (model.status === 'loading') {
      const fraction = loading?.fraction;
      const text = [loading?.stage ?? 'loading into memory'];
      if (fraction !== null && fraction !== undefined) {
        text.push(`${Math.round(fraction * 100)}%`);
      }
      row.append(element('div', 'lmsp-panel-loading', text.join(' ')));
    }
    return row;
  }

  private async change(
    modelId: string,
    change: 'load' | 'unload',
    button: HTMLButtonElement
  ): Promise<void> {
    button.disabled = true;
    const done = changeModel(modelId, change);
    // A load takes seconds: show it loading rather than wait for the next poll.
    const early = await Promise.race([
      done.then(() => false),
      new Promise<boolean>(resolve => window.setTimeout(() => resolve(true), SHOW_LOADING_MS))
    ]).catch(() => false);
    if (early) {
      await this.refresh();
    }
    try {
      await done;
    } catch (reason) {
      const verb = change === 'load' ? 'Load' : 'Unload';
      this.error.textContent = `${verb} failed: ${(reason as Error).message}`;
      button.disabled = false;
      return;
    }
    await this.refresh();
  }

  private showTasks(tasks: ILmspTask[]): void {
    const json = JSON.stringify(tasks.map(({ result, ...rest }) => [rest, result?.usage]));
    if (json === this.shown.tasks) {
      return;
    }
    this.shown.tasks = json;
    this.taskList.replaceChildren(
      ...rowsOrEmpty(
        tasks.map(task => this.taskRow(task)),
        this.trans.__('No tasks')
      )
    );
  }

  private taskRow(task: ILmspTask): HTMLLIElement {
    const { row, line } = listRow('task', task.id, task.status);
    if (isRunning(task)) {
      const cancel = element('button', 'jp-Button jp-mod-styled jp-mod-warn lmsp-panel-cancel');
      cancel.textContent = this.trans.__('Cancel');
      cancel.addEventListener('click', () => void this.cancel(task.id, cancel));
      line.append(cancel);
    }
    const details = [new Date(task.created_at * 1000).toLocaleTimeString()];
    const rate = taskRate(task, this.trans);
    if (task.result) {
      details.push(task.result.model, rate.text);
    } else if (task.status === 'queued' && task.queue_position !== undefined) {
      details.push(`#${task.queue_position} in queue`);
    } else if (task.status === 'in_progress') {
      details.push('running');
    }
    const info = element('div', 'lmsp-panel-details', details.filter(Boolean).join(' · '));
    if (task.result && rate.title) {
      info.title = rate.title;
    }
    row.append(line, info);
    return row;
  }

  private async cancel(taskId: string, button: HTMLButtonElement): Promise<void> {
    button.disabled = true;
    try {
      await cancelTask(taskId);
    } catch (reason) {
      this.error.textContent = `Cancel failed: ${(reason as Error).message}`;
    }
    await this.refresh();
  }
}

/** Adds the LMSP panel to the left area. */
export const panelPlugin: JupyterFrontEndPlugin<void> = {
  id: 'lmsp-jupyter:panel',
  description: 'A side panel listing the LMSP models and tasks.',
  autoStart: true,
  optional: [ITranslator],
  activate: (app: JupyterFrontEnd, translator: ITranslator | null): void => {
    const trans = extensionBundle(translator);
    app.shell.add(new LmspPanel(trans), 'left', { rank: 900 });
  }
};
