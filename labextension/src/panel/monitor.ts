/**
 * One poll of the LMSP service for every view that shows it: the status-bar item always, the
 * side panel while it is visible (it also wants the recent tasks). A refresh asked for by one
 * view (a click) reaches them all.
 */
import { Signal, type ISignal } from '@lumino/signaling';

import { listMcpServers, listModels, listTasks } from '../protocol/api';
import type { ILmspMcpServer, ILmspModels, ILmspTask } from '../protocol/types';

const POLL_MS = 2000;
const RECENT_TASKS = 20;

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

/** What one poll found. */
export interface IServiceSnapshot {
  models: ILmspModels;
  /** Whether one of the Jupyter user's tasks is in progress. */
  generating: boolean;
  /** The newest tasks, newest first, while a watcher wants them; else null. */
  recent: ILmspTask[] | null;
  /** The MCP servers, while a watcher wants the recent tasks; null then from a service
   * without MCP. */
  mcpServers: ILmspMcpServer[] | null;
}

/** Polls the service while anyone watches, and tells every watcher what it found. */
export class ServiceMonitor {
  private readonly _poller = new Poller(() => this.refresh(), POLL_MS);
  private readonly _changed = new Signal<this, IServiceSnapshot>(this);
  private readonly _failed = new Signal<this, Error>(this);
  private _watchers = 0;
  private _recentWatchers = 0;

  /** A poll's findings. */
  get changed(): ISignal<this, IServiceSnapshot> {
    return this._changed;
  }

  /** A poll that could not reach the service. */
  get failed(): ISignal<this, Error> {
    return this._failed;
  }

  /** Poll from now on (with the recent tasks if `recent`); the result stops watching. */
  watch(recent: boolean): () => void {
    this._watchers += 1;
    this._recentWatchers += recent ? 1 : 0;
    if (this._watchers === 1) {
      this._poller.start();
    } else if (recent) {
      void this.refresh(); // the poll already running did not fetch what this watcher wants
    }
    let watching = true;
    return () => {
      if (watching) {
        watching = false;
        this._watchers -= 1;
        this._recentWatchers -= recent ? 1 : 0;
        if (this._watchers === 0) {
          this._poller.stop();
        }
      }
    };
  }

  /** Ask the service now, out of turn; watchers hear of it through the signals. */
  async refresh(): Promise<void> {
    try {
      const panel = this._recentWatchers > 0;
      const [models, running, recent, mcpServers] = await Promise.all([
        listModels(),
        listTasks({ status: 'in_progress', limit: 1 }),
        panel ? listTasks({ limit: RECENT_TASKS }) : null,
        panel ? listMcpServers() : null
      ]);
      this._changed.emit({ models, generating: running.length > 0, recent, mcpServers });
    } catch (reason) {
      this._failed.emit(reason as Error);
    }
  }
}

let shared: ServiceMonitor | null = null;

/** The monitor the side panel and the status-bar item share. */
export function sharedMonitor(): ServiceMonitor {
  shared ??= new ServiceMonitor();
  return shared;
}
