import type { Result } from 'ioredis';
import { FINISHED_SESSION_STATES, type SessionEnded } from '../domain/session.js';
import { FINISHED_TASK_STATES, isWaitingForSlot } from '../domain/task.js';
import { waitingScore } from '../rules/critical-path.js';
import { defineScripts, type RedisConnection } from '../redis.js';
import { APPLY_SCRIPT } from './apply-script.js';
import { fenceField, sessionEndedChannel, sessionKeys } from './keys.js';
import type { ApplyResult, ApplyStatus, Changeset } from './session-records.js';
import { unsettledUsageArgs } from './usage-store.js';
import type { WrittenTasks } from './written-tasks.js';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /**
     * One array (ioredis flattens it): the ten keys (meta, tasks, taskVersions, outbox, applied,
     * history, usage, deleted, ready, fences), then applyArgs. A spread would put every argument on the call
     * stack, and a plan of 20,000 tasks has more than it holds.
     */
    orqApply(keysThenArgs: (string | number)[]): Result<[string, number, number], Context>;
  }
}

/**
 * The one write of a session's state: a changeset, applied atomically by APPLY_SCRIPT. Keeps this
 * process's copy of the open tasks it wrote (WrittenTasks) in step with what each apply did, and
 * announces a session's end.
 */
export class ChangesetWriter {
  constructor(
    private readonly redis: RedisConnection,
    private readonly prefix: string,
    private readonly written: WrittenTasks,
    private readonly historyMaxLength: number,
    private readonly now: () => Date,
  ) {
    defineScripts(redis, { orqApply: [10, APPLY_SCRIPT] });
  }

  async apply(sessionId: string, changeset: Changeset): Promise<ApplyResult> {
    const keys = sessionKeys(this.prefix, sessionId);
    const args = applyArgs(changeset, {
      sessionId,
      timestamp: this.now().toISOString(),
      historyMaxLength: this.historyMaxLength,
    });
    args.unshift(
      keys.meta,
      keys.tasks,
      keys.taskVersions,
      keys.outbox,
      keys.applied,
      keys.history,
      keys.usage,
      keys.deleted,
      keys.ready,
      keys.fences,
    );
    const [status, open, active] = await this.redis.orqApply(args);
    const ended = changeset.session?.record.state;
    const finished = ended !== undefined && FINISHED_SESSION_STATES.includes(ended);
    if (finished) this.written.forget(sessionId);
    else this.rememberWrites(sessionId, changeset, status as ApplyStatus);
    if (status === 'OK' && ended && finished) {
      await this.announceEnded({ sessionId, state: ended });
    }
    return {
      status: status as ApplyStatus,
      counters: { open: Number(open), active: Number(active) },
    };
  }

  /**
   * After an apply: OK keeps the open tasks it wrote, at their new versions. A refusal drops
   * what it built on (one stale copy must not cost the session's others); a change of the
   * session's state drops all of the session's copies.
   */
  private rememberWrites(sessionId: string, changeset: Changeset, status: ApplyStatus): void {
    const tasks = changeset.tasks ?? [];
    if (status === 'STATE' || status === 'COUNTERS' || status === 'GONE') {
      this.written.forget(sessionId);
    } else if (status !== 'OK') {
      for (const { task } of [...tasks, ...(changeset.readTasks ?? [])]) {
        this.written.drop(sessionId, task.id);
      }
    } else {
      for (const { task, version } of tasks) {
        // Finished tasks are not transitioned again by a verdict: no need to keep their results.
        if (FINISHED_TASK_STATES.includes(task.state)) this.written.drop(sessionId, task.id);
        else this.written.put(sessionId, { task, version: version + 1 });
      }
    }
  }

  /**
   * Tells every process that the session ended, so its model calls in flight stop now. Best
   * effort: a lost message (a Redis blip, a process not subscribed yet) is caught by the
   * processes' own polling of the session's state, only later.
   */
  private async announceEnded(message: SessionEnded): Promise<void> {
    await this.redis
      .publish(sessionEndedChannel(this.prefix), JSON.stringify(message))
      .catch(() => undefined);
  }
}

/** APPLY_SCRIPT's arguments for a changeset (the layout is documented with the script). */
export function applyArgs(
  changeset: Changeset,
  stamp: { sessionId: string; timestamp: string; historyMaxLength: number },
): (string | number)[] {
  const tasks = changeset.tasks ?? [];
  const written = new Set(tasks.map((t) => t.task.id));
  const expect = [...tasks, ...(changeset.readTasks ?? []).filter((t) => !written.has(t.task.id))];
  const outbox = changeset.outbox ?? [];
  const history = changeset.history ?? [];
  const { session, requireCounters, counters } = changeset;
  const args: (string | number)[] = [
    changeset.eventId,
    (changeset.requireStates ?? []).join(','),
    session ? session.expectedVersion : '',
    session ? JSON.stringify(session.record) : '',
    session ? session.record.state : '',
    requireCounters?.open ?? '',
    requireCounters?.active ?? '',
    counters?.open ?? 0,
    counters?.active ?? 0,
    stamp.historyMaxLength,
    changeset.budgetRaised ? '1' : '',
    expect.length,
    tasks.length,
    outbox.length,
    history.length,
    changeset.unsettledUsage?.length ?? 0,
  ];
  for (const t of expect) args.push(t.task.id, t.version);
  for (const t of tasks) args.push(t.task.id, JSON.stringify(t.task), t.version + 1);
  for (const j of outbox) args.push(j.jobId, JSON.stringify(j));
  // The stamp is appended to each entry's JSON: a spread copy of every entry cost three times
  // the stringify (15.7 against 5.6 µs for a verdict's four entries). A key the entry has
  // already is written twice, and JSON.parse keeps the last, as the spread did.
  const stampJson = `"timestamp":${JSON.stringify(stamp.timestamp)},"sessionId":${JSON.stringify(stamp.sessionId)}}`;
  for (const h of history) {
    const json = JSON.stringify(h);
    args.push(json === '{}' ? `{${stampJson}` : `${json.slice(0, -1)},${stampJson}`);
  }
  if (changeset.unsettledUsage) args.push(...unsettledUsageArgs(changeset.unsettledUsage));
  args.push(changeset.slotLimit ?? '');
  // Every task written joins or leaves the ready set by what it now is, so the set never
  // disagrees with the records (a cancelled or dispatched task leaves it in the same write).
  for (const t of tasks)
    args.push(isWaitingForSlot(t.task) ? waitingScore(t.task.criticalPath) : '');
  const { fence } = changeset;
  args.push(fence ? fenceField(fence.taskId, fence.attempt) : '', fence?.value ?? '');
  // Only while the integration is under way (INTEGRATING, or RUNNING or BLOCKED in its
  // resolution or fixes).
  const record = session?.record;
  const underWay = ['INTEGRATING', 'RUNNING', 'BLOCKED'].includes(record?.state ?? '');
  args.push((underWay && record?.integration?.phase) || '');
  return args;
}
