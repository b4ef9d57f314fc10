/**
 * The rates of output tokens the views of a page show, and how they show them: apart from the
 * reducer so that the side panel shows them without loading the answer's rendering.
 */
/**
 * Each round's output tokens per second, by task id, as its answer measured it (the round's
 * own timing: watched live, or timed by the kernel): computed once, by the answer, and shown
 * by every view of the task (the answer's header, the side panel's task row).
 */
const roundRates = new Map<string, number>();

/** Note the rate an answer measured for the round of task `taskId`. */
export function noteRoundRate(taskId: string, rate: number): void {
  roundRates.set(taskId, rate);
}

/** The rate an answer in this page measured for the round of task `taskId`, or null. */
export function roundRate(taskId: string): number | null {
  return roundRates.get(taskId) ?? null;
}

/** Output tokens per second of `tokens` written in `seconds`; null when no time was measured. */
export function outputRate(tokens: number, seconds: number): number | null {
  return seconds > 0 ? tokens / seconds : null;
}

/** `20.0 tok/s`: how every view shows a rate of output tokens. */
export function formatRate(tokensPerSecond: number, digits = 1): string {
  return `${tokensPerSecond.toFixed(digits)} tok/s`;
}
