/**
 * One ask as the views see it: the kernel's durable `AnswerState` plus the live
 * events of its running round.
 */
import {
  applyEvents,
  emptyRound,
  isFinal,
  roundFromResponse,
  tokensPerSecond,
  type IRoundView
} from './reducer';
import { noteRoundRate, outputRate } from './rates';
import {
  draftedTokens,
  type IAnswerState,
  type AnswerStatus,
  type IRoundState,
  type ITaskEvent,
  type IUsage
} from '../protocol/types';

const RUNNING: ReadonlySet<AnswerStatus> = new Set(['queued', 'in_progress']);

/** An `AnswerState` with the live rounds reduced from events. */
export class Answer {
  private _state: IAnswerState | null = null;
  private readonly _live = new Map<string, IRoundView>();

  /** The durable state last set, if any. */
  get state(): IAnswerState | null {
    return this._state;
  }

  /**
   * Take a new durable state. Live rounds are kept after their response is saved:
   * their timing still tells the tokens per second.
   */
  setState(state: IAnswerState): void {
    this._state = state;
  }

  /**
   * Apply events of task `taskId` that arrived at `now` (ms). Returns whether anything
   * changed: events of other tasks, finished rounds and already applied ids change nothing.
   */
  applyEvents(taskId: string, events: readonly ITaskEvent[], now: number): boolean {
    if (!this.runningTaskIds().includes(taskId)) {
      return false;
    }
    const before = this._live.get(taskId) ?? emptyRound(taskId);
    const after = applyEvents(before, events, now);
    this._live.set(taskId, after);
    return after !== before;
  }

  /** Id of the last event applied for `taskId` (0 before the first). */
  lastEventId(taskId: string): number {
    return this._live.get(taskId)?.lastEventId ?? 0;
  }

  /** Tasks of rounds whose response is not saved yet: the ones to follow. */
  runningTaskIds(): string[] {
    return (this._state?.rounds ?? []).filter(r => r.response === null).map(r => r.task_id);
  }

  /** The task still generating, if any: a running round without a final event. */
  activeTaskId(): string | null {
    return (
      this.runningTaskIds().find(id => {
        const live = this._live.get(id);
        return !live || !isFinal(live);
      }) ?? null
    );
  }

  /** Every round, finished ones from their saved response, running ones from events. */
  rounds(): IRoundView[] {
    return (this._state?.rounds ?? []).map(round =>
      round.response
        ? roundFromResponse(round.task_id, round.response)
        : (this._live.get(round.task_id) ?? emptyRound(round.task_id))
    );
  }

  /**
   * The ask's status. The kernel's word, except that a running ask whose live round has
   * ended shows how it ended until the kernel says what comes next.
   */
  status(): AnswerStatus {
    const status = this._state?.status ?? 'queued';
    if (!RUNNING.has(status)) {
      return status;
    }
    const rounds = this._state?.rounds ?? [];
    const last = rounds[rounds.length - 1];
    const live = last && !last.response ? this._live.get(last.task_id) : undefined;
    if (!live) {
      return status;
    }
    return live.status === 'queued' ? status : live.status;
  }

  /** Whether generation may still be going on (a Stop makes sense). */
  isRunning(): boolean {
    return RUNNING.has(this.status());
  }

  /** Tokens of all rounds with known usage, or null when none is known. */
  usage(): IUsage | null {
    const known = this.rounds()
      .map(round => round.usage)
      .filter((usage): usage is IUsage => usage !== null);
    if (known.length === 0) {
      return null;
    }
    return known.reduce((sum, usage) => ({
      input_tokens: sum.input_tokens + usage.input_tokens,
      output_tokens: sum.output_tokens + usage.output_tokens,
      total_tokens: sum.total_tokens + usage.total_tokens,
      extensions: {
        'x-lmsp-jupyter': { accepted_draft_tokens: draftedTokens(sum) + draftedTokens(usage) }
      }
    }));
  }

  /**
   * Output tokens per second of the newest round with a known rate: watched live here, or
   * timed by the kernel that watched it (a saved answer), or null.
   */
  tokensPerSecond(): number | null {
    const rates = (this._state?.rounds ?? []).map(round => this.roundRate(round));
    return rates.reverse().find(rate => rate !== null) ?? null;
  }

  /** A round's rate, noted for the other views of its task (`roundRate`). */
  private roundRate(round: IRoundState): number | null {
    const live = this._live.get(round.task_id);
    const usage = round.response?.usage ?? live?.usage ?? null;
    let rate = live ? tokensPerSecond({ ...live, usage }) : null;
    if (rate === null && usage && round.seconds) {
      rate = outputRate(usage.output_tokens, round.seconds);
    }
    if (rate !== null) {
      noteRoundRate(round.task_id, rate);
    }
    return rate;
  }
}
