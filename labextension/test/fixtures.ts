/** Events and states as the service and the kernel send them. */
import type { IAnswerState, ITaskEvent } from '../src/protocol/types';

export const TASK = 'task_01';
export const RESP = 'resp_01';
export const MSG = 'msg_01';

export function state(overrides: Partial<IAnswerState> = {}): IAnswerState {
  return {
    version: 1,
    ask_id: 'ask_1',
    kernel_id: 'k1',
    model: 'gemma3:270m-q4_k_m',
    status: 'in_progress',
    rounds: [{ task_id: TASK, response: null }],
    tool_calls: {},
    error: null,
    ...overrides
  };
}

export function created(id = 1): ITaskEvent {
  return { id, event: 'response.created', data: { response_id: RESP, status: 'in_progress' } };
}

export function messageAdded(id: number, itemId = MSG): ITaskEvent {
  return {
    id,
    event: 'response.output_item.added',
    data: {
      response_id: RESP,
      output_index: 0,
      item: { type: 'message', id: itemId, role: 'assistant', content: [] }
    }
  };
}

export function textDelta(id: number, delta: string, itemId = MSG): ITaskEvent {
  return {
    id,
    event: 'response.output_text.delta',
    data: { response_id: RESP, item_id: itemId, delta }
  };
}

export function messageDone(id: number, text: string, itemId = MSG): ITaskEvent {
  return {
    id,
    event: 'response.output_item.done',
    data: {
      response_id: RESP,
      output_index: 0,
      item: {
        type: 'message',
        id: itemId,
        role: 'assistant',
        content: [{ type: 'output_text', text }]
      }
    }
  };
}

export function completed(id: number, outputTokens = 3): ITaskEvent {
  return {
    id,
    event: 'response.completed',
    data: {
      response_id: RESP,
      status: 'completed',
      usage: { input_tokens: 5, output_tokens: outputTokens, total_tokens: 5 + outputTokens }
    }
  };
}
