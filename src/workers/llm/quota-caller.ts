import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * The job whose model calls run in this async context, as the quota line ranks them (issue 46,
 * quota-line.ts). The role wrapper (registry.ts) sets it for each job run; the models of a
 * session fill in its tenant and priority (ModelResolver). Model providers are shared by every
 * session of a configuration, so the line learns who calls from here, not from its arguments.
 */
export interface QuotaCaller {
  jobId: string;
  sessionId: string;
  tenant?: string | undefined;
  /** The session's priority, 1 to 9. */
  priority?: number | undefined;
  /** A plan, plan-judgement or replan job: ahead of task work at the line. */
  step: boolean;
  criticalPath?: number | undefined;
  /**
   * Lanes of this job's calls in flight (a judge's samples run side by side): a call's id at
   * the line is `<job id>|<lane>`, the lowest free lane, so the job's call that waited before a
   * hand-back finds its place again when the job runs again.
   */
  lanes: Set<number>;
  /** The limits this run's calls waited at. */
  joined: Set<string>;
}

const callers = new AsyncLocalStorage<QuotaCaller>();

/** Runs `work` with `caller` as the job of every model call it makes. */
export function runAsQuotaCaller<T>(caller: QuotaCaller, work: () => T): T {
  return callers.run(caller, work);
}

export function currentQuotaCaller(): QuotaCaller | undefined {
  return callers.getStore();
}

/** The current job's session is this one: its tenant and priority rank the job's calls. */
export function describeQuotaSession(session: {
  id: string;
  tenant: string;
  priority: number;
}): void {
  const caller = callers.getStore();
  if (!caller || caller.sessionId !== session.id) return;
  caller.tenant = session.tenant;
  caller.priority = session.priority;
}

/** The id of a call at the line, in the lowest lane free; give the lane back when it ends. */
export function takeLane(caller: QuotaCaller): { callId: string; release(): void } {
  let lane = 0;
  while (caller.lanes.has(lane)) lane += 1;
  caller.lanes.add(lane);
  return { callId: `${caller.jobId}|${lane}`, release: () => caller.lanes.delete(lane) };
}

/** Lanes a job's leftovers are looked for in when it ends (a judge takes at most a few). */
export const LANES_SWEPT = 8;

/** The ids a job's calls could have at a line. */
export function laneIds(jobId: string): string[] {
  return Array.from({ length: LANES_SWEPT }, (_, lane) => `${jobId}|${lane}`);
}
