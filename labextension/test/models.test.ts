import { describe, expect, it } from 'vitest';

import { Answer } from '../src/render';
import type { IAnswerState, ILmspModel, ILmspTask } from '../src/protocol/types';
import { modelDetails, taskRate } from '../src/panel/models';
import { extensionBundle } from '../src/translation';

const trans = extensionBundle();

function model(fields: Partial<ILmspModel>): ILmspModel {
  return {
    id: 'gemma3:270m-q4_k_m',
    status: 'available',
    size_bytes: 253_000_000,
    owned_by: 'local',
    context_length: 32768,
    capabilities: ['streaming', 'tools'],
    ...fields
  };
}

describe('modelDetails', () => {
  it('gives a local model its file size', () => {
    expect(modelDetails(model({}))).toEqual([
      '253 MB',
      `${(32768).toLocaleString()} ctx`,
      'streaming, tools'
    ]);
  });

  it('says whether a model is a chat model or a base model, when the service says', () => {
    const base = model({ extensions: { 'x-lmsp-jupyter': { kind: 'base' } } });
    expect(modelDetails(base)).toEqual([
      '253 MB',
      `${(32768).toLocaleString()} ctx`,
      'base model',
      'streaming, tools'
    ]);
    const chat = model({ extensions: { 'x-lmsp-jupyter': { kind: 'chat' } } });
    expect(modelDetails(chat)[2]).toBe('chat model');
  });

  it('names the server of a remote model, which has no size here, instead of "0 B"', () => {
    const remote = model({ id: 'gpu/llama', size_bytes: null, owned_by: 'gpu' });
    expect(modelDetails(remote)[0]).toBe('remote: gpu');
  });
});

function task(fields: Partial<ILmspTask>): ILmspTask {
  return {
    id: 'task_rate',
    status: 'completed',
    created_at: 100,
    started_at: 100,
    completed_at: 102,
    result: {
      id: 'resp_rate',
      status: 'completed',
      model: 'm',
      output: [],
      usage: { input_tokens: 4, output_tokens: 30, total_tokens: 34 }
    },
    ...fields
  } as ILmspTask;
}

describe('taskRate', () => {
  it("shows the rate the task's answer measured, the figure its answer view shows", () => {
    const answer = new Answer();
    answer.setState({
      status: 'completed',
      rounds: [
        {
          task_id: 'task_measured',
          seconds: 1.5,
          response: {
            id: 'resp_measured',
            status: 'completed',
            model: 'm',
            output: [],
            usage: { input_tokens: 4, output_tokens: 30, total_tokens: 34 }
          }
        }
      ]
    } as IAnswerState);
    expect(answer.tokensPerSecond()).toBe(20);
    // 2 whole seconds between the task's times would say 15.0 tok/s: the answer's figure wins.
    expect(taskRate(task({ id: 'task_measured' }), trans)).toEqual({
      text: '20.0 tok/s',
      title: 'Output tokens per second, as its answer measured'
    });
  });

  it('falls back to the whole seconds of a task no answer here measured', () => {
    expect(taskRate(task({}), trans).text).toBe('15.0 tok/s');
    expect(taskRate(task({ completed_at: 100 }), trans).text).toBe('>30 tok/s');
    expect(taskRate(task({ result: null }), trans).text).toBe('');
  });
});
