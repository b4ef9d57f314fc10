import { describe, expect, it } from 'vitest';

import type { ILmspModel } from '../src/render';
import { modelDetails } from '../src/models';

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

  it('names the server of a remote model, which has no size here, instead of "0 B"', () => {
    const remote = model({ id: 'gpu/llama', size_bytes: null, owned_by: 'gpu' });
    expect(modelDetails(remote)[0]).toBe('remote: gpu');
  });
});
