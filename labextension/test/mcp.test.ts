/** MCP in the views: approval cards, calls the service ran, listed tools, restore, the panel. */
import { beforeEach, describe, expect, it, vi } from 'vitest';

import { AnswerView, type IAnswerActions } from '../src/render';
import type { ILmspMcpServer, ILmspTask, OutputItem } from '../src/protocol/types';
import { mcpServerDetails, mcpServerStatus } from '../src/panel/models';
import { McpServerList } from '../src/panel/mcpservers';
import { planRestorations, sourceHash } from '../src/notebook/restore';
import { extensionBundle } from '../src/translation';
import widget from '../src/widget';
import { RESP, TASK, created, state } from './fixtures';

const ARGS = '{"path":"notes.txt"}';
const REQUEST: OutputItem = {
  type: 'mcp_approval_request',
  id: 'mcpr_1',
  server_label: 'files',
  name: 'read_file',
  arguments: ARGS
};
const LISTED: OutputItem = {
  type: 'mcp_list_tools',
  id: 'mcpl_1',
  server_label: 'files',
  tools: [
    { name: 'read_file', description: 'Read a file.', input_schema: {} },
    { name: 'write_file', input_schema: {} }
  ]
};

function ran(fields: { output?: string; error?: string }): OutputItem {
  return {
    type: 'mcp_call',
    id: 'mcp_1',
    server_label: 'files',
    name: 'read_file',
    arguments: ARGS,
    approval_request_id: 'mcpr_1',
    ...fields
  };
}

function waiting(output: OutputItem[] = [LISTED, REQUEST]) {
  return state({
    status: 'requires_action',
    rounds: [{ task_id: TASK, response: { id: RESP, status: 'completed', model: 'm', output } }],
    tool_calls: {
      mcpr_1: {
        name: 'read_file',
        arguments: ARGS,
        decision: 'pending',
        output: null,
        server_label: 'files'
      }
    }
  });
}

let actions: IAnswerActions & { decide: ReturnType<typeof vi.fn> };

function viewOf(initial = waiting()): AnswerView {
  const view = new AnswerView(actions, { now: () => 0, requestFrame: () => undefined });
  view.setState(initial);
  return view;
}

beforeEach(() => {
  actions = { stop: vi.fn(), decide: vi.fn() };
});

describe('an MCP approval card', () => {
  it('shows the server, the tool and its arguments, with Approve, Deny and Always', () => {
    const card = viewOf().node.querySelector<HTMLElement>('.lmsp-call[data-call-id="mcpr_1"]')!;
    expect(card.dataset.type).toBe('mcp_approval_request');
    expect(card.dataset.runsIn).toBe('service');
    expect(card.querySelector('.lmsp-call-label')?.textContent).toBe('MCP tool');
    expect(card.querySelector('.lmsp-call-server')?.textContent).toBe('files');
    expect(card.querySelector('.lmsp-call-name')?.textContent).toBe('read_file');
    expect(card.querySelector('.lmsp-call-arguments')?.textContent).toBe(
      '{\n  "path": "notes.txt"\n}'
    );
    expect(card.querySelector('.lmsp-call-decision')?.textContent).toBe('pending');
    const buttons = Array.from(card.querySelectorAll('button')).map(b => b.textContent);
    expect(buttons).toEqual(['Approve', 'Deny', 'Always for this tool']);
  });

  it('sends approve, deny, or approve always for this tool, once', () => {
    for (const [button, expected] of [
      ['.lmsp-approve', ['mcpr_1', 'approve']],
      ['.lmsp-deny', ['mcpr_1', 'deny']],
      ['.lmsp-always', ['mcpr_1', 'approve', true]]
    ] as const) {
      actions.decide.mockClear();
      const card = viewOf().node.querySelector('.lmsp-call[data-call-id="mcpr_1"]')!;
      card.querySelector<HTMLButtonElement>(button)!.click();
      expect(actions.decide.mock.calls).toEqual([expected]);
      const all = Array.from(card.querySelectorAll<HTMLButtonElement>('button'));
      expect(all.every(b => b.disabled)).toBe(true);
    }
  });

  it('has no Always for a function call', () => {
    const call: OutputItem = {
      type: 'function_call',
      id: 'fc_1',
      call_id: 'call_1',
      name: 'f',
      arguments: '{}'
    };
    const view = viewOf(
      state({
        status: 'requires_action',
        rounds: [
          { task_id: TASK, response: { id: RESP, status: 'completed', model: 'm', output: [call] } }
        ],
        tool_calls: { call_1: { name: 'f', arguments: '{}', decision: 'pending', output: null } }
      })
    );
    expect(view.node.querySelector('.lmsp-always')).toBeNull();
    expect(view.node.querySelector('.lmsp-call-server')).toBeNull();
  });

  it('goes through the anywidget view with always', () => {
    const sent: Record<string, unknown>[] = [];
    const el = document.createElement('div');
    const model = {
      get: () => waiting(),
      on: () => undefined,
      off: () => undefined,
      send: (content: Record<string, unknown>) => sent.push(content)
    };
    widget.render({ model, el });
    el.querySelector<HTMLButtonElement>('.lmsp-always')!.click();
    expect(sent).toEqual([
      { type: 'decide', call_id: 'mcpr_1', decision: 'approve', always: true }
    ]);
  });
});

describe('MCP items', () => {
  it('shows a call the service ran with its output, and one that failed with its error', () => {
    const view = viewOf(waiting([ran({ output: 'hello from notes' })]));
    const call = view.node.querySelector<HTMLElement>('.lmsp-mcp-call')!;
    expect(call.dataset.outcome).toBe('done');
    expect(call.querySelector('.lmsp-call-label')?.textContent).toBe('MCP call');
    expect(call.querySelector('.lmsp-call-server')?.textContent).toBe('files');
    expect(call.querySelector('.lmsp-call-output pre')?.textContent).toBe('hello from notes');
    expect(call.querySelector('button')).toBeNull();

    view.setState(waiting([ran({ error: 'the server crashed' })]));
    const failed = view.node.querySelector<HTMLElement>('.lmsp-mcp-call')!;
    expect(failed.dataset.outcome).toBe('error');
    expect(failed.querySelector('.lmsp-call-error pre')?.textContent).toBe('the server crashed');
    expect(failed.querySelector('.lmsp-call-output')).toBeNull();
  });

  it('lists a server tools compactly, folded', () => {
    const listed = viewOf().node.querySelector<HTMLDetailsElement>('details.lmsp-mcp-tools')!;
    expect(listed.open).toBe(false);
    expect(listed.querySelector('summary')?.textContent).toBe('files: 2 tools');
    expect(listed.querySelector('.lmsp-mcp-tools-names')?.textContent).toBe(
      'read_file · write_file'
    );
  });

  it('arrive live as output items', () => {
    const view = viewOf(state());
    view.applyEvents(TASK, [
      created(1),
      {
        id: 2,
        event: 'response.output_item.done',
        data: { response_id: RESP, output_index: 0, item: ran({ output: 'live' }) }
      }
    ]);
    expect(view.node.querySelector('.lmsp-mcp-call .lmsp-call-output pre')?.textContent).toBe(
      'live'
    );
  });
});

describe('restore', () => {
  it('puts an ask whose last round ended with an MCP approval request back waiting', () => {
    const source = '%lmsp ask --mcp files Read notes.txt';
    const task: ILmspTask = {
      id: 'task_2',
      status: 'completed',
      created_at: 1,
      started_at: 1,
      completed_at: 2,
      result: { id: 'resp_2', status: 'completed', model: 'm', output: [LISTED, REQUEST] },
      metadata: {
        notebook: 'n.ipynb',
        cell: 'c1',
        ask: 'ask_1',
        kernel: 'k1',
        source_hash: sourceHash(source)
      }
    };
    const cell = { id: 'c1', source, outputs: [], dismissed: null };
    const [restored] = planRestorations([task], [cell], new Set());
    expect(restored.state.status).toBe('requires_action');
    expect(restored.state.tool_calls).toEqual({
      mcpr_1: {
        name: 'read_file',
        arguments: ARGS,
        decision: 'pending',
        output: null,
        server_label: 'files'
      }
    });
    // and the restored card offers the same buttons
    const view = viewOf(restored.state);
    expect(
      view.node.querySelector('.lmsp-call[data-call-id="mcpr_1"] .lmsp-always')
    ).not.toBeNull();
  });
});

const SERVERS: ILmspMcpServer[] = [
  {
    label: 'files',
    transport: 'stdio',
    state: 'running',
    error: null,
    disabled: false,
    tools: [{ name: 'read_file', description: 'Read a file.', input_schema: {} }]
  },
  {
    label: 'remote',
    transport: 'http',
    state: 'failed',
    error: 'connection refused',
    disabled: false,
    tools: null
  },
  { label: 'off', transport: 'sse', state: 'stopped', error: null, disabled: true, tools: null }
];

describe('MCP servers in the side panel', () => {
  it('say their transport, tools and state', () => {
    expect(SERVERS.map(mcpServerStatus)).toEqual(['running', 'failed', 'disabled']);
    expect(mcpServerDetails(SERVERS[0])).toEqual(['stdio', '1 tool']);
    expect(mcpServerDetails(SERVERS[1])).toEqual(['http', 'tools listed once it runs']);
  });

  it('are listed with their state, a failed one with its error; nothing without MCP', () => {
    const list = new McpServerList(extensionBundle());
    list.show(null);
    expect(list.node.hidden).toBe(true);

    list.show(SERVERS);
    expect(list.node.hidden).toBe(false);
    const rows = Array.from(list.node.querySelectorAll<HTMLElement>('.lmsp-panel-server'));
    expect(rows.map(row => [row.dataset.serverId, row.dataset.status])).toEqual([
      ['files', 'running'],
      ['remote', 'failed'],
      ['off', 'disabled']
    ]);
    expect(rows[0].querySelector('.lmsp-panel-tool')?.textContent).toBe('read_file');
    expect(rows[0].querySelector<HTMLElement>('.lmsp-panel-tool')?.title).toBe('Read a file.');
    expect(rows[1].querySelector('.lmsp-panel-server-error')?.textContent).toBe(
      'connection refused'
    );
    expect(rows[2].querySelector('.lmsp-panel-server-tools')).toBeNull();

    list.show([]);
    expect(list.node.querySelector('.lmsp-panel-empty')?.textContent).toBe(
      'No MCP servers configured'
    );
  });
});
