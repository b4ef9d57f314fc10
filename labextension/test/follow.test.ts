import { describe, expect, it, vi } from 'vitest';

import { TaskFollower, type FollowEnd } from '../src/protocol/follow';
import type { ITaskEvent } from '../src/protocol/types';
import { SseParser, toTaskEvent } from '../src/protocol/sse';

const URL = '/lmsp/v1/tasks/task_01/events';

function frame(id: number, event: string, data: object): string {
  return `id: ${id}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

const delta = (id: number, text: string): string =>
  frame(id, 'response.output_text.delta', { response_id: 'r', item_id: 'm', delta: text });
const completed = (id: number): string =>
  frame(id, 'response.completed', {
    response_id: 'r',
    status: 'completed',
    usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 }
  });

/** A streaming reply whose body yields `chunks`, then ends (or fails when `fail`). */
function sseReply(chunks: string[], fail = false): globalThis.Response {
  const encoder = new TextEncoder();
  const queue = [...chunks];
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      const chunk = queue.shift();
      if (chunk !== undefined) {
        controller.enqueue(encoder.encode(chunk));
      } else if (fail) {
        controller.error(new TypeError('network error'));
      } else {
        controller.close();
      }
    }
  });
  return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
}

function problemReply(status: number, code: string): globalThis.Response {
  return new Response(JSON.stringify({ status, code, detail: code }), {
    status,
    headers: { 'Content-Type': 'application/problem+json' }
  });
}

function follow(replies: globalThis.Response[], after = 0) {
  const urls: string[] = [];
  const received: ITaskEvent[][] = [];
  const ends: FollowEnd[] = [];
  const follower = new TaskFollower({
    url: URL,
    after,
    onEvents: events => received.push(events),
    onEnd: end => ends.push(end),
    fetch: async url => {
      urls.push(url);
      const reply = replies.shift();
      if (!reply) {
        throw new TypeError('offline');
      }
      return reply;
    },
    sleep: async () => undefined,
    maxRetries: 2
  });
  return { follower, urls, received, ends };
}

describe('SseParser', () => {
  it('parses events split across chunks at any point', () => {
    const parser = new SseParser();
    const text = delta(1, 'a') + delta(2, 'b');
    const messages = [];
    for (const char of text) {
      messages.push(...parser.feed(char));
    }
    expect(messages.map(m => [m.id, m.event])).toEqual([
      ['1', 'response.output_text.delta'],
      ['2', 'response.output_text.delta']
    ]);
  });

  it('skips comments and accepts CRLF line endings', () => {
    const parser = new SseParser();
    const messages = parser.feed(': keep-alive\r\n\r\nid: 7\r\nevent: x\r\ndata: {"a":1}\r\n\r\n');
    expect(messages).toEqual([{ id: '7', event: 'x', data: '{"a":1}' }]);
  });

  it('handles a CRLF split between chunks', () => {
    const parser = new SseParser();
    expect(parser.feed('id: 1\r\ndata: {}\r')).toEqual([]);
    expect(parser.feed('\n\r\n')).toEqual([{ id: '1', event: 'message', data: '{}' }]);
  });

  it('joins data lines and remembers retry', () => {
    const parser = new SseParser();
    expect(parser.feed('retry: 2500\ndata: a\ndata: b\n\n')).toEqual([
      { id: null, event: 'message', data: 'a\nb' }
    ]);
    expect(parser.retry).toBe(2500);
  });

  it('reads task events with integer ids and JSON data only', () => {
    expect(toTaskEvent({ id: '3', event: 'e', data: '{"x":1}' })).toEqual({
      id: 3,
      event: 'e',
      data: { x: 1 }
    });
    expect(toTaskEvent({ id: null, event: 'e', data: '{}' })).toBeNull();
    expect(toTaskEvent({ id: '3', event: 'e', data: 'not json' })).toBeNull();
  });
});

describe('TaskFollower', () => {
  it('follows until the final event', async () => {
    const { follower, urls, received, ends } = follow([
      sseReply([delta(1, 'a') + delta(2, 'b'), completed(3)])
    ]);
    await follower.run();
    expect(urls).toEqual([`${URL}?after=0`]);
    expect(received.map(batch => batch.map(e => e.id))).toEqual([[1, 2], [3]]);
    expect(ends).toEqual([{ reason: 'final' }]);
  });

  it('starts after the last id the view rendered', async () => {
    const { follower, urls } = follow([sseReply([completed(9)])], 8);
    await follower.run();
    expect(urls).toEqual([`${URL}?after=8`]);
  });

  it('resumes after the last id received when the connection drops', async () => {
    const { follower, urls, received, ends } = follow([
      sseReply([delta(1, 'a'), delta(2, 'b'), 'id: 3\nevent: response.output_text.del'], true),
      sseReply([delta(2, 'b'), delta(3, 'c'), completed(4)])
    ]);
    await follower.run();
    expect(urls).toEqual([`${URL}?after=0`, `${URL}?after=2`]);
    expect(received.flat().map(e => e.id)).toEqual([1, 2, 3, 4]);
    expect(ends).toEqual([{ reason: 'final' }]);
  });

  it('reconnects when the stream closes before its final event', async () => {
    const { follower, urls } = follow([sseReply([delta(1, 'a')]), sseReply([completed(2)])]);
    await follower.run();
    expect(urls).toEqual([`${URL}?after=0`, `${URL}?after=1`]);
  });

  it('ends with the problem when the event history expired', async () => {
    const { follower, ends } = follow([problemReply(410, 'event_history_expired')]);
    await follower.run();
    expect(ends).toEqual([
      {
        reason: 'problem',
        status: 410,
        problem: { status: 410, code: 'event_history_expired', detail: 'event_history_expired' }
      }
    ]);
  });

  it('ends with the problem when the task is not found', async () => {
    const { follower, ends } = follow([problemReply(404, 'task_not_found')]);
    await follower.run();
    expect(ends[0]).toMatchObject({
      reason: 'problem',
      status: 404,
      problem: { code: 'task_not_found' }
    });
  });

  it('gives up after too many failed connections', async () => {
    const { follower, urls, ends } = follow([]);
    await follower.run();
    expect(urls).toHaveLength(3);
    expect(ends).toEqual([{ reason: 'unreachable' }]);
  });

  it('calls nothing after dispose', async () => {
    const onEvents = vi.fn();
    const follower = new TaskFollower({
      url: URL,
      after: 0,
      onEvents,
      onEnd: vi.fn(),
      fetch: async () => {
        follower.dispose();
        return sseReply([delta(1, 'a')]);
      }
    });
    await follower.run();
    expect(onEvents).not.toHaveBeenCalled();
  });
});
