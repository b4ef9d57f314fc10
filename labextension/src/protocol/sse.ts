/**
 * Server-sent events (the WHATWG event-stream format) parsed from text chunks,
 * and LMSP task events read from them.
 */
import type { ITaskEvent } from './types';

/** One dispatched server-sent event (`ServerSentEvent` in the Python client). */
export interface IServerSentEvent {
  id: string | null;
  event: string;
  data: string;
}

/** An incremental event-stream parser: feed it text as it arrives. */
export class SseParser {
  /** The last `retry:` the stream asked for, in ms, or null. */
  retry: number | null = null;

  private _buffer = '';
  private _data: string[] = [];
  private _event = '';
  private _id: string | null = null;
  private _pendingCr = false;

  /** Parse a chunk; returns the messages it completed. */
  feed(chunk: string): IServerSentEvent[] {
    let text = chunk;
    if (this._pendingCr && text.startsWith('\n')) {
      text = text.slice(1);
    }
    this._pendingCr = text.endsWith('\r');
    this._buffer += text;
    const lines = this._buffer.split(/\r\n|\r|\n/);
    this._buffer = lines.pop() ?? '';
    const messages: IServerSentEvent[] = [];
    for (const line of lines) {
      const message = this._line(line);
      if (message) {
        messages.push(message);
      }
    }
    return messages;
  }

  private _line(line: string): IServerSentEvent | null {
    if (line === '') {
      return this._dispatch();
    }
    if (line.startsWith(':')) {
      return null;
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    switch (field) {
      case 'data':
        this._data.push(value);
        break;
      case 'event':
        this._event = value;
        break;
      case 'id':
        if (!value.includes('\0')) {
          this._id = value;
        }
        break;
      case 'retry':
        if (/^\d+$/.test(value)) {
          this.retry = Number(value);
        }
        break;
    }
    return null;
  }

  private _dispatch(): IServerSentEvent | null {
    const data = this._data;
    const event = this._event;
    this._data = [];
    this._event = '';
    if (data.length === 0) {
      return null;
    }
    return { id: this._id, event: event || 'message', data: data.join('\n') };
  }
}

/** The LMSP event of an SSE message, or null when it has no integer id or JSON data. */
export function toTaskEvent(message: IServerSentEvent): ITaskEvent | null {
  const id = Number(message.id);
  if (message.id === null || !Number.isInteger(id)) {
    return null;
  }
  try {
    const data = JSON.parse(message.data) as unknown;
    if (typeof data !== 'object' || data === null) {
      return null;
    }
    return { id, event: message.event, data: data as Record<string, unknown> };
  } catch {
    return null;
  }
}
