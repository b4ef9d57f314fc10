/**
 * The LMSP 1.0 wire objects the views read (spec sections 6.2-6.4), and the
 * `AnswerState` every `%lmsp ask` displays (application/vnd.lmsp.task+json).
 */

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete' | 'failed' | 'cancelled';

export type AnswerStatus = 'queued' | 'requires_action' | ResponseStatus;

export type Decision = 'pending' | 'approved' | 'denied' | 'auto';

/** An RFC 9457 problem document. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  code?: string;
  detail?: string;
  param?: string | null;
}

export interface Usage {
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
}

export interface OutputText {
  type: 'output_text';
  text: string;
}

export interface OutputMessage {
  type: 'message';
  id: string;
  role: 'assistant';
  content: OutputText[];
}

export interface OutputFunctionCall {
  type: 'function_call';
  id: string;
  call_id: string;
  name: string;
  arguments: string;
}

export interface OutputReasoning {
  type: 'reasoning';
  id: string;
  summary: { type: 'summary_text'; text: string }[];
}

export type OutputItem = OutputMessage | OutputFunctionCall | OutputReasoning;

/** A response object (6.2). */
export interface Response {
  id: string;
  object?: 'response';
  created_at?: number;
  status: ResponseStatus;
  model: string;
  output: OutputItem[];
  usage?: Usage | null;
  error?: Problem | null;
  incomplete_details?: { reason: string } | null;
}

/** One numbered event of a response stream: SSE `id`, `event` and parsed `data`. */
export interface TaskEvent {
  id: number;
  event: string;
  data: Record<string, unknown>;
}

/** A function call of a finished round and what became of it. */
export interface ToolCallState {
  name: string;
  arguments: string;
  decision: Decision;
  output: string | null;
}

/** One task of an ask; `response` is null while it runs. */
export interface RoundState {
  task_id: string;
  response: Response | null;
  /** Seconds from the first output token to the end, as the kernel watched it live. */
  seconds?: number | null;
}

/** The durable state of one ask, as the kernel displays it. */
export interface AnswerState {
  version: number;
  ask_id: string;
  kernel_id: string | null;
  model: string;
  status: AnswerStatus;
  rounds: RoundState[];
  tool_calls: Record<string, ToolCallState>;
  error: Problem | null;
}

/** The events that end a stream; exactly one ends each (6.3). */
export const FINAL_EVENTS: ReadonlySet<string> = new Set([
  'response.completed',
  'response.incomplete',
  'response.failed',
  'response.cancelled',
  'error'
]);
