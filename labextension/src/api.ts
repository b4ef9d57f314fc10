/**
 * The LMSP endpoints as the browser reaches them: same origin, the user's Jupyter session.
 *
 * `ServerConnection.makeRequest` adds the base URL, the session cookie, the page's token
 * and the `X-XSRFToken` header (from the `_xsrf` cookie) that Jupyter wants on a POST.
 */
import { ServerConnection } from '@jupyterlab/services';

import type { Problem, Response } from './render';

/** What this service adds to a model that is loading: how far it has come. */
export interface LmspLoadingProgress {
  stage: string;
  fraction: number | null;
}

/** A model the service can run (LMSP 1.0 section 8). */
export interface LmspModel {
  id: string;
  status: 'available' | 'loading' | 'loaded' | 'unavailable';
  /** Null for a model served by a remote server (its file is not here). */
  size_bytes: number | null;
  /** `local`, or the name of the remote server that serves it. */
  owned_by: string;
  context_length: number;
  capabilities: string[];
  /** Only while loaded: memory taken, when it was loaded, when it unloads if idle (null: never). */
  memory_bytes?: number;
  loaded_at?: number;
  expires_at?: number | null;
  extensions?: { 'x-lmsp-jupyter'?: { loading?: LmspLoadingProgress | null } };
}

/** The models, and why configured model directories give none. */
export interface LmspModels {
  models: LmspModel[];
  notices: string[];
}

/** The parts of a task (LMSP 1.0 section 7) the panel and the status bar show. */
export interface LmspTask {
  id: string;
  status: 'queued' | 'in_progress' | 'completed' | 'incomplete' | 'failed' | 'cancelled';
  created_at: number;
  started_at: number | null;
  completed_at: number | null;
  queue_position?: number;
  result: Response | null;
  error?: Problem | null;
  /** The request's metadata: where a kernel's ask came from (notebook, cell, kernel, ask). */
  metadata?: Record<string, string>;
}

/** A task that has not reached a final status yet. */
export function isRunning(task: LmspTask): boolean {
  return task.status === 'queued' || task.status === 'in_progress';
}

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

async function request<T>(path: string, init: RequestInit = {}): Promise<T> {
  const url = `${settings.baseUrl}lmsp/v1${path}`;
  const response = await ServerConnection.makeRequest(url, init, settings);
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
export async function listModels(): Promise<LmspModels> {
  const list = await request<{
    data: LmspModel[];
    extensions?: { 'x-lmsp-jupyter'?: { notices: string[] } };
  }>('/models');
  return { models: list.data, notices: list.extensions?.['x-lmsp-jupyter']?.notices ?? [] };
}

/** `POST lmsp/v1/models/{id}/load` or `/unload`: the model afterwards. */
export async function changeModel(modelId: string, change: 'load' | 'unload'): Promise<LmspModel> {
  return request<LmspModel>(`/models/${encodeURIComponent(modelId)}/${change}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' }
  });
}

/** `GET lmsp/v1/tasks`: the Jupyter user's tasks, newest first; `metadata` must all match. */
export async function listTasks(
  query: { limit?: number; status?: LmspTask['status']; metadata?: Record<string, string> } = {}
): Promise<LmspTask[]> {
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
  return (await request<{ data: LmspTask[] }>(`/tasks${search ? `?${search}` : ''}`)).data;
}

/** `POST lmsp/v1/tasks/{id}/cancel`. */
export async function cancelTask(taskId: string): Promise<LmspTask> {
  return request<LmspTask>(`/tasks/${encodeURIComponent(taskId)}/cancel`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' }
  });
}

/**
 * Calls `refresh` now and then every `intervalMs` after each call settles, so slow replies
 * never pile up; a hidden browser tab skips the timed calls. `refresh` reports its own errors.
 */
export class Poller {
  private timer: number | null = null;
  // Bumped by start and stop, so a call still in flight from before cannot schedule another.
  private generation = 0;
  private running = false;

  constructor(
    private readonly refresh: () => Promise<void>,
    private readonly intervalMs: number
  ) {}

  /** Start polling (a second call does nothing). */
  start(): void {
    if (!this.running) {
      this.running = true;
      this.generation += 1;
      void this.tick(this.generation);
    }
  }

  /** Stop polling until the next `start`. */
  stop(): void {
    this.running = false;
    this.generation += 1;
    if (this.timer !== null) {
      window.clearTimeout(this.timer);
      this.timer = null;
    }
  }

  /** Refresh now, out of turn. */
  async now(): Promise<void> {
    await this.refresh();
  }

  private async tick(generation: number): Promise<void> {
    this.timer = null;
    if (document.visibilityState !== 'hidden') {
      await this.refresh();
    }
    if (generation === this.generation) {
      this.timer = window.setTimeout(() => void this.tick(generation), this.intervalMs);
    }
  }
}
