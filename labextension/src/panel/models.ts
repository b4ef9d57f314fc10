/**
 * What the side panel says of a model or a task, with no DOM.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { formatRate, outputRate, roundRate } from '../render/rates';
import type { ILmspMcpServer, ILmspModel, ILmspTask } from '../protocol/types';

/** `253 MB`, `1.2 GB`: sizes the way disks count them. */
export function formatBytes(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return `${value >= 100 || unit === 0 ? Math.round(value) : value.toFixed(1)} ${units[unit]}`;
}

/** The details line of a model: its file size (or the remote server serving it), window, kind
 * (a chat model, or a base model that continues the text as written) and capabilities. */
export function modelDetails(model: ILmspModel): string[] {
  const kind = model.extensions?.['x-lmsp-jupyter']?.kind;
  return [
    model.size_bytes === null ? `remote: ${model.owned_by}` : formatBytes(model.size_bytes),
    `${model.context_length.toLocaleString()} ctx`,
    ...(kind ? [`${kind} model`] : []),
    model.capabilities.join(', ')
  ];
}

/** What the side panel says of a finished task's rate, and how that figure was made. */
export interface ITaskRate {
  text: string;
  title: string;
}

/**
 * Output tokens per second of a finished task: the figure its answer in this page measured
 * (the round's own timing, the one the answer shows), else from the task's times, which are
 * whole seconds (a run that started and ended within the same second only gives a lower bound).
 */
export function taskRate(task: ILmspTask, trans: TranslationBundle): ITaskRate {
  const measured = roundRate(task.id);
  if (measured !== null) {
    return {
      text: formatRate(measured),
      title: trans.__('Output tokens per second, as its answer measured')
    };
  }
  const tokens = task.result?.usage?.output_tokens;
  if (tokens === undefined || task.started_at === null || task.completed_at === null) {
    return { text: '', title: '' };
  }
  const rate = outputRate(tokens, task.completed_at - task.started_at);
  return {
    text: rate !== null ? formatRate(rate) : `>${formatRate(tokens, 0)}`,
    title: trans.__('Output tokens ÷ (completed_at − started_at), in whole seconds')
  };
}

/** An MCP server's status badge: its state, or `disabled`. */
export function mcpServerStatus(server: ILmspMcpServer): string {
  return server.disabled ? 'disabled' : server.state;
}

/** The details line of an MCP server: its transport and how many tools it offers (once the
 * service has listed them, which it does when the server first runs). */
export function mcpServerDetails(server: ILmspMcpServer): string[] {
  const tools = server.tools;
  return [
    server.transport,
    tools === null
      ? 'tools listed once it runs'
      : `${tools.length} ${tools.length === 1 ? 'tool' : 'tools'}`
  ];
}
