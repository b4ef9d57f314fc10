/**
 * The front end's one module of protocol types: the LMSP 1.0 wire objects it reads (spec
 * sections 6-8), and the `AnswerState` every `%lmsp ask` displays
 * (application/vnd.lmsp.task+json).
 */

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete' | 'failed' | 'cancelled';

export type AnswerStatus = 'queued' | 'requires_action' | ResponseStatus;

export type Decision = 'pending' | 'approved' | 'denied' | 'auto';

/** An RFC 9457 problem document. */
export interface IProblem {
  type?: string;
  title?: string;
  status?: number;
  code?: string;
  detail?: string;
  param?: string | null;
}

export interface IUsage {
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
  /** The service's own counts: output tokens verified from drafts (speculation). */
  extensions?: { 'x-lmsp-jupyter'?: { accepted_draft_tokens?: number } };
}

/** Output tokens of ``usage`` that were verified from drafts (0 when not reported). */
export function draftedTokens(usage: IUsage): number {
  return usage.extensions?.['x-lmsp-jupyter']?.accepted_draft_tokens ?? 0;
}

/** One of the most likely tokens at a position (11.1, OpenAI's shape). */
export interface ITopLogprob {
  token: string;
  logprob: number;
  bytes?: number[] | null;
}

/** An output token's logprob and the most likely tokens at its position, most likely first. */
export interface ILogprob extends ITopLogprob {
  top_logprobs?: ITopLogprob[];
}

export interface IOutputText {
  type: 'output_text';
  text: string;
  /** Present when the request asked for logprobs (`include`, `--logprobs N`). */
  logprobs?: ILogprob[] | null;
}

export interface IOutputMessage {
  type: 'message';
  id: string;
  role: 'assistant';
  content: IOutputText[];
}

export interface IOutputFunctionCall {
  type: 'function_call';
  id: string;
  call_id: string;
  name: string;
  arguments: string;
}

export interface IOutputReasoning {
  type: 'reasoning';
  id: string;
  summary: { type: 'summary_text'; text: string }[];
}

/** A tool an MCP server offers (11.6). */
export interface IMcpTool {
  name: string;
  description?: string | null;
  input_schema?: Record<string, unknown>;
}

/** The tools of an MCP server the service offered the model (11.6). */
export interface IOutputMcpListTools {
  type: 'mcp_list_tools';
  id: string;
  server_label: string;
  tools: IMcpTool[];
  error?: string | null;
}

/** A call the service ran on an MCP server: its output, or its error (11.6). */
export interface IOutputMcpCall {
  type: 'mcp_call';
  id: string;
  server_label: string;
  name: string;
  arguments: string;
  output?: string | null;
  error?: string | Record<string, unknown> | null;
  approval_request_id?: string | null;
}

/** An MCP call that waits for the client's approval (11.6). */
export interface IOutputMcpApprovalRequest {
  type: 'mcp_approval_request';
  id: string;
  server_label: string;
  name: string;
  arguments: string;
}

export type OutputItem =
  | IOutputMessage
  | IOutputFunctionCall
  | IOutputReasoning
  | IOutputMcpListTools
  | IOutputMcpCall
  | IOutputMcpApprovalRequest;

/** The output item types a view shows. */
export const OUTPUT_ITEM_TYPES: ReadonlySet<string> = new Set([
  'message',
  'reasoning',
  'function_call',
  'mcp_list_tools',
  'mcp_call',
  'mcp_approval_request'
]);

/** A response object (6.2). */
export interface IResponse {
  id: string;
  object?: 'response';
  created_at?: number;
  status: ResponseStatus;
  model: string;
  output: OutputItem[];
  usage?: IUsage | null;
  error?: IProblem | null;
  incomplete_details?: { reason: string } | null;
}

/** One numbered event of a response stream: SSE `id`, `event` and parsed `data`. */
export interface ITaskEvent {
  id: number;
  event: string;
  data: Record<string, unknown>;
}

/** A function call of a finished round and what became of it. */
export interface IToolCallState {
  name: string;
  arguments: string;
  decision: Decision;
  output: string | null;
  /** `notebook`: a notebook tool, which JupyterLab performs on approval (absent: kernel). */
  runs_in?: 'kernel' | 'notebook';
  /** The MCP server of an MCP call waiting for approval (absent: a function call). */
  server_label?: string;
}

/** One task of an ask; `response` is null while it runs. */
export interface IRoundState {
  task_id: string;
  response: IResponse | null;
  /** Seconds from the first output token to the end, as the kernel watched it live. */
  seconds?: number | null;
}

/** The durable state of one ask, as the kernel displays it. */
export interface IAnswerState {
  version: number;
  ask_id: string;
  kernel_id: string | null;
  model: string;
  status: AnswerStatus;
  rounds: IRoundState[];
  tool_calls: Record<string, IToolCallState>;
  error: IProblem | null;
  /** The prompt as sent, when it carries notebook context (`--context`): shown folded. */
  prompt?: string | null;
}

/** The events that end a stream; exactly one ends each (6.3). */
export const FINAL_EVENTS: ReadonlySet<string> = new Set([
  'response.completed',
  'response.incomplete',
  'response.failed',
  'response.cancelled',
  'error'
]);

/** What this service adds to a model that is loading: how far it has come. */
export interface ILmspLoadingProgress {
  stage: string;
  fraction: number | null;
}

/** A model the service can run (LMSP 1.0 section 8). */
export interface ILmspModel {
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
  /** This service's additions: its kind (`chat`, with a chat template; `base`, continuing the
   * text as written), progress while loading, why temperature 0 may not be exact. */
  extensions?: {
    'x-lmsp-jupyter'?: {
      kind?: 'chat' | 'base';
      loading?: ILmspLoadingProgress | null;
      inexact?: string;
    };
  };
}

/** The models, and why configured model directories give none. */
export interface ILmspModels {
  models: ILmspModel[];
  notices: string[];
}

/** The parts of a task (LMSP 1.0 section 7) the panel and the status bar show. */
export interface ILmspTask {
  id: string;
  status: 'queued' | 'in_progress' | 'completed' | 'incomplete' | 'failed' | 'cancelled';
  created_at: number;
  started_at: number | null;
  completed_at: number | null;
  queue_position?: number;
  result: IResponse | null;
  error?: IProblem | null;
  /** The request's metadata: where a kernel's ask came from (notebook, cell, kernel, ask). */
  metadata?: Record<string, string>;
}

/** An MCP server the service runs (`GET lmsp/v1/mcp/servers`). */
export interface ILmspMcpServer {
  label: string;
  transport: 'stdio' | 'http' | 'sse';
  state: 'stopped' | 'running' | 'failed';
  error: string | null;
  disabled: boolean;
  /** Null while the service has not listed them (a server not started yet). */
  tools: IMcpTool[] | null;
}

/** A task that has not reached a final status yet. */
export function isRunning(task: ILmspTask): boolean {
  return task.status === 'queued' || task.status === 'in_progress';
}
