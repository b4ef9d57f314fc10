/**
 * What the side panel says of a model, with no DOM.
 */
import type { LmspModel } from './api';

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

/** The details line of a model: its file size (or the remote server serving it), window and
 * capabilities. */
export function modelDetails(model: LmspModel): string[] {
  return [
    model.size_bytes === null ? `remote: ${model.owned_by}` : formatBytes(model.size_bytes),
    `${model.context_length.toLocaleString()} ctx`,
    model.capabilities.join(', ')
  ];
}
