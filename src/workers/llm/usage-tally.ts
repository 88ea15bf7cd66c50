import type { UnsettledUsage } from '../../shared/queues.js';
import type { UsageStore } from '../../shared/store/usage-store.js';

/**
 * The usage of one job's model calls that the job passes on with its result, to be counted by
 * the write that receives it, instead of one settlement per call (metered.ts records here only
 * calls that hold no reservation). What the job does not pass on, it settles itself.
 */
export class UsageTally {
  private entries: UnsettledUsage[] = [];

  record(usage: UnsettledUsage): void {
    this.entries.push(usage);
  }

  /** What to pass on, as the field of the job or event that carries it (none when nothing is). */
  field(): { unsettledUsage?: UnsettledUsage[] } {
    return this.entries.length > 0 ? { unsettledUsage: [...this.entries] } : {};
  }

  /** Call once the job or event that carries field() was written. */
  passedOn(): void {
    this.entries = [];
  }

  /** Counts what was not passed on (a job that ends without handing its result on). */
  async settleRest(store: UsageStore, sessionId: string): Promise<void> {
    const rest = this.entries;
    this.entries = [];
    for (const usage of rest) await store.settleUnsettled(sessionId, usage);
  }
}
