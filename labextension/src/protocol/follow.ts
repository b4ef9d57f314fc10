/**
 * Following a task's events from the browser (LMSP 6.4): replay then live, resumed
 * with `?after=` the last id received after a dropped connection.
 */
import { FINAL_EVENTS, type IProblem, type ITaskEvent } from './types';
import { SseParser, toTaskEvent } from './sse';

/** Why following ended. */
export type FollowEnd =
  | { reason: 'final' }
  | { reason: 'problem'; status: number; problem: IProblem }
  | { reason: 'unreachable' };

/** What a follower needs; `fetch` and `sleep` are swapped in tests. */
export interface ITaskFollowerOptions {
  /** `{baseUrl}lmsp/v1/tasks/{id}/events`, without a query. */
  url: string;
  /** Resume after this event id (0: from the start). */
  after: number;
  onEvents(events: ITaskEvent[]): void;
  onEnd(end: FollowEnd): void;
  /** Called when a connection dropped and the follower is about to reconnect. */
  onRetry?(attempt: number): void;
  fetch?: (url: string, init: RequestInit) => Promise<globalThis.Response>;
  sleep?: (ms: number) => Promise<void>;
  /** Consecutive failed connections before giving up. */
  maxRetries?: number;
}

const DEFAULT_RETRY_MS = 1000;
const MAX_RETRY_MS = 15000;

/** Follows one task's event stream until its final event; `dispose()` stops it. */
export class TaskFollower {
  private readonly _options: ITaskFollowerOptions;
  private readonly _abort = new AbortController();
  private _parser = new SseParser();
  private _retryMs: number | null = null;
  private _after: number;
  private _final = false;

  constructor(options: ITaskFollowerOptions) {
    this._options = options;
    this._after = options.after;
  }

  /** Id of the last event received: where a reconnection resumes. */
  get after(): number {
    return this._after;
  }

  /** The URL the next connection asks for. */
  get nextUrl(): string {
    return `${this._options.url}?after=${this._after}`;
  }

  get isDisposed(): boolean {
    return this._abort.signal.aborted;
  }

  /** Follow until the final event, a problem, or too many failed connections. */
  async run(): Promise<void> {
    const sleep = this._options.sleep ?? (ms => new Promise(resolve => setTimeout(resolve, ms)));
    const maxRetries = this._options.maxRetries ?? 30;
    let failures = 0;
    while (!this.isDisposed) {
      const before = this._after;
      const end = await this._connect();
      if (this.isDisposed) {
        return;
      }
      if (end) {
        this._options.onEnd(end);
        return;
      }
      failures = this._after > before ? 1 : failures + 1;
      if (failures > maxRetries) {
        this._options.onEnd({ reason: 'unreachable' });
        return;
      }
      this._options.onRetry?.(failures);
      const base = this._retryMs ?? DEFAULT_RETRY_MS;
      await sleep(Math.min(base * 2 ** (failures - 1), MAX_RETRY_MS));
    }
  }

  /** Stop following; no callback is called afterwards. */
  dispose(): void {
    this._abort.abort();
  }

  /** One connection: the end when following is over, null when it should reconnect. */
  private async _connect(): Promise<FollowEnd | null> {
    const doFetch = this._options.fetch ?? ((url, init) => fetch(url, init));
    let response: globalThis.Response;
    try {
      response = await doFetch(this.nextUrl, {
        headers: { Accept: 'text/event-stream' },
        credentials: 'same-origin',
        cache: 'no-store',
        signal: this._abort.signal
      });
    } catch {
      return null;
    }
    if (!response.ok || !response.body) {
      return this._failure(response);
    }
    // A dropped connection may leave half an event behind: each connection parses afresh.
    this._parser = new SseParser();
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done || this.isDisposed) {
          return null;
        }
        this._receive(value);
        if (this._final) {
          return { reason: 'final' };
        }
      }
    } catch {
      return null;
    } finally {
      this._retryMs = this._parser.retry ?? this._retryMs;
      reader.releaseLock();
    }
  }

  private _receive(chunk: string): void {
    const events: ITaskEvent[] = [];
    for (const message of this._parser.feed(chunk)) {
      const event = toTaskEvent(message);
      if (event && event.id > this._after) {
        events.push(event);
        this._after = event.id;
        this._final ||= FINAL_EVENTS.has(event.event);
      }
    }
    if (events.length > 0 && !this.isDisposed) {
      this._options.onEvents(events);
    }
  }

  /** 4xx ends following with the server's problem; other failures are retried. */
  private async _failure(response: globalThis.Response): Promise<FollowEnd | null> {
    if (response.status < 400 || response.status >= 500) {
      return null;
    }
    let problem: IProblem = { status: response.status, title: response.statusText };
    try {
      problem = (await response.json()) as IProblem;
    } catch {
      // Not a problem document: keep the status line.
    }
    return { reason: 'problem', status: response.status, problem };
  }
}
