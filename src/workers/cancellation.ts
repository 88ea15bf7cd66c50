import { FINISHED_SESSION_STATES, type SessionState } from '../shared/domain/session.js';
import { OrqError } from '../shared/errors.js';
import type { CallContext, RoleModels } from './llm/types.js';

/** Reads a session's current state; undefined when the session is gone. */
export type SessionStateReader = (sessionId: string) => Promise<SessionState | undefined>;

interface Watch {
  controller: AbortController;
  leases: number;
}

/**
 * Aborts the model calls of a session that was cancelled (or failed, or deleted) while they
 * run. A cancel is applied by whichever coordinator takes the event, possibly in another
 * process. That coordinator announces the session's end (SessionStore.apply), and `ended()`
 * aborts the calls at once; as the announcement is pub/sub and may be missed (a reconnect), the
 * process also reads the session's state every `intervalMs` while it has calls in flight, and
 * not at all when it has none.
 */
export class SessionCancellation {
  private readonly watched = new Map<string, Watch>();
  private timer: NodeJS.Timeout | undefined;
  private polling = false;

  constructor(
    private readonly readState: SessionStateReader,
    private readonly intervalMs = 1000,
  ) {}

  /** A signal that aborts when the session finishes; call release() when the call ends. */
  watch(sessionId: string): { signal: AbortSignal; release(): void } {
    let watch = this.watched.get(sessionId);
    if (!watch) {
      watch = { controller: new AbortController(), leases: 0 };
      this.watched.set(sessionId, watch);
    }
    watch.leases += 1;
    this.schedule();
    let released = false;
    const entry = watch;
    return {
      signal: entry.controller.signal,
      release: () => {
        if (released) return;
        released = true;
        entry.leases -= 1;
        if (entry.leases === 0 && this.watched.get(sessionId) === entry) {
          this.watched.delete(sessionId);
        }
        if (this.watched.size === 0) this.stop();
      },
    };
  }

  /** The session reached `state` (announced on sessionEndedChannel): stop its calls now. */
  ended(sessionId: string, state: SessionState): void {
    const watch = this.watched.get(sessionId);
    if (watch && FINISHED_SESSION_STATES.includes(state)) this.abort(sessionId, watch, state);
  }

  /** Sessions with calls in flight (for tests and metrics). */
  get size(): number {
    return this.watched.size;
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /**
   * Aborts the calls holding `watch` and forgets it: work that starts later gets a signal of
   * its own. A BUDGET_EXHAUSTED session can be resumed, and its next executions must not find
   * the signal of the calls its budget stopped already aborted.
   */
  private abort(sessionId: string, watch: Watch, state: SessionState | undefined): void {
    if (this.watched.get(sessionId) === watch) this.watched.delete(sessionId);
    if (this.watched.size === 0) this.stop();
    if (watch.controller.signal.aborted) return;
    watch.controller.abort(
      new OrqError('LLM_CALL_FAILED', `session ${sessionId} is ${state ?? 'gone'}`, {
        details: { sessionId, state },
      }),
    );
  }

  private schedule(): void {
    if (this.timer || this.polling || this.watched.size === 0) return;
    this.timer = setTimeout(() => void this.poll(), this.intervalMs);
    this.timer.unref();
  }

  private async poll(): Promise<void> {
    this.timer = undefined;
    this.polling = true;
    try {
      for (const [sessionId, watch] of [...this.watched]) {
        if (watch.controller.signal.aborted) continue;
        const state = await this.readState(sessionId).catch(() => 'unknown' as const);
        // 'unknown': a Redis hiccup; the next round asks again.
        if (state === 'unknown') continue;
        if (state === undefined || FINISHED_SESSION_STATES.includes(state)) {
          this.abort(sessionId, watch, state);
        }
      }
    } finally {
      this.polling = false;
      this.schedule();
    }
  }
}

/** RoleModels whose every call also stops when its session is cancelled. */
export function cancellableModels(
  models: RoleModels,
  cancellation: SessionCancellation,
): RoleModels {
  async function run<Q extends CallContext, R>(request: Q, call: (q: Q) => Promise<R>) {
    const lease = cancellation.watch(request.sessionId);
    try {
      const signal = request.signal
        ? AbortSignal.any([request.signal, lease.signal])
        : lease.signal;
      return await call({ ...request, signal });
    } finally {
      lease.release();
    }
  }
  return {
    label: models.label,
    ...(models.estimate ? { estimate: models.estimate.bind(models) } : {}),
    plan: (request) => run(request, (q) => models.plan(q)),
    judgePlan: (request) => run(request, (q) => models.judgePlan(q)),
    execute: (request) => run(request, (q) => models.execute(q)),
    judgeTask: (request) => run(request, (q) => models.judgeTask(q)),
    replan: (request) => run(request, (q) => models.replan(q)),
  };
}
