/**
 * The rows of the side panel's lists: a model, a task or an MCP server, with no JupyterLab.
 */
import { element } from '../render/dom';

/** The rows of a list, or one row saying it is `empty`. */
export function rowsOrEmpty(rows: HTMLLIElement[], empty: string): HTMLLIElement[] {
  return rows.length ? rows : [element('li', 'lmsp-panel-empty', empty)];
}

/**
 * A model's, a task's or an MCP server's row (`data-model-id`, `data-task-id` or
 * `data-server-id`, and `data-status`) and its first line: the id and a status badge; the
 * caller adds buttons to the line and details below.
 */
export function listRow(
  kind: 'model' | 'task' | 'server',
  id: string,
  status: string
): { row: HTMLLIElement; line: HTMLDivElement } {
  const row = element('li', `lmsp-panel-${kind}`);
  row.dataset[`${kind}Id`] = id;
  row.dataset.status = status;
  const line = element('div', 'lmsp-panel-line');
  line.append(
    element(kind === 'task' ? 'code' : 'span', `lmsp-panel-${kind}-id`, id),
    element('span', `lmsp-panel-badge lmsp-panel-status-${status}`, status)
  );
  return { row, line };
}
