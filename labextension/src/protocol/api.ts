/**
 * The LMSP endpoints as the browser reaches them: same origin, the user's Jupyter session.
 *
 * `ServerConnection.makeRequest` adds the base URL, the session cookie, the page's token
 * and the `X-XSRFToken` header (from the `_xsrf` cookie) that Jupyter wants on a POST.
 */
import { ServerConnection } from '@jupyterlab/services';

import type { ILmspMcpServer, ILmspModel, ILmspModels, ILmspTask } from './types';

/** A failed request: the HTTP status and, when the service sent a problem, its code. */
export class LmspRequestError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    detail: string
  ) {
    super(detail);
  }
}

const settings = ServerConnection.makeSettings();

/** A URL under this Jupyter server's LMSP root, e.g. `/user/me/lmsp/v1/tasks/…`. */
function lmspUrl(...parts: string[]): string {
  return `${settings.baseUrl}lmsp/v1/${parts.map(encodeURIComponent).join('/')}`;
}

/** A fetch with the user's Jupyter session: cookie, page token, XSRF header. */
export function sessionFetch(url: string, init: RequestInit = {}): Promise<globalThis.Response> {
  return ServerConnection.makeRequest(url, init, settings);
}

/** `lmsp/v1/completions`: OpenAI's Completions, where inline completions come from. */
export function completionsUrl(): string {
  return lmspUrl('completions');
}

/** `lmsp/v1/tasks/{id}/events`, without a query: where a follower reads a task's events. */
export function taskEventsUrl(taskId: string): string {
  return lmspUrl('tasks', taskId, 'events');
}

async function request<T>(path: string[], init: RequestInit = {}, query = ''): Promise<T> {
  const response = await sessionFetch(lmspUrl(...path) + query, init);
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    throw new LmspRequestError(
      response.status,
      body?.code ?? 'http_error',
      body?.detail ?? `${response.status} ${response.statusText}`
    );
  }
  return body as T;
}

/** `GET lmsp/v1/models`. */
export async function listModels(): Promise<ILmspModels> {
  const list = await request<{
    data: ILmspModel[];
    extensions?: { 'x-lmsp-jupyter'?: { notices: string[] } };
  }>(['models']);
  return { models: list.data, notices: list.extensions?.['x-lmsp-jupyter']?.notices ?? [] };
}

/** `POST lmsp/v1/models/{id}/load` or `/unload`: the model afterwards. */
export async function changeModel(modelId: string, change: 'load' | 'unload'): Promise<ILmspModel> {
  return request<ILmspModel>(['models', modelId, change], {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' }
  });
}

/** `GET lmsp/v1/tasks`: the Jupyter user's tasks, newest first; `metadata` must all match. */
export async function listTasks(
  query: { limit?: number; status?: ILmspTask['status']; metadata?: Record<string, string> } = {}
): Promise<ILmspTask[]> {
  const params = new URLSearchParams();
  if (query.limit !== undefined) {
    params.set('limit', String(query.limit));
  }
  if (query.status !== undefined) {
    params.set('status', query.status);
  }
  for (const [key, value] of Object.entries(query.metadata ?? {})) {
    params.set(`metadata.${key}`, value);
  }
  const search = params.toString();
  return (await request<{ data: ILmspTask[] }>(['tasks'], {}, search ? `?${search}` : '')).data;
}

/** `GET lmsp/v1/tasks/{id}`. */
export async function getTask(taskId: string): Promise<ILmspTask> {
  return request<ILmspTask>(['tasks', taskId]);
}

/** `POST lmsp/v1/tasks/{id}/cancel`. */
export async function cancelTask(taskId: string): Promise<ILmspTask> {
  return request<ILmspTask>(['tasks', taskId, 'cancel'], {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' }
  });
}

/** `GET lmsp/v1/mcp/servers`: the MCP servers the service runs; null from a service without
 * MCP (404). */
export async function listMcpServers(): Promise<ILmspMcpServer[] | null> {
  try {
    return (await request<{ data: ILmspMcpServer[] }>(['mcp', 'servers'])).data;
  } catch (error) {
    if (error instanceof LmspRequestError && error.status === 404) {
      return null;
    }
    throw error;
  }
}
