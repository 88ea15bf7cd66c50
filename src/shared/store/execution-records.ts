import type { Result } from 'ioredis';
import { HistoryEntry, type HistoryEntryDraft } from '../domain/history.js';
import { TaskResult } from '../domain/task.js';
import { OrqError } from '../errors.js';
import { fenceSuffix } from '../queues.js';
import { defineScripts, type RedisConnection } from '../redis.js';
import { fenceField, sessionKeys } from './keys.js';
import type { TaskStepRecord } from './session-records.js';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    orqAppendStep(
      steps: string,
      history: string,
      meta: string,
      countField: string,
      step: number,
      stepField: string,
      record: string,
      entry: string,
      historyMaxLength: number,
    ): Result<string, Context>;
    orqPutResult(
      meta: string,
      results: string,
      fences: string,
      field: string,
      record: string,
      fenceField: string,
      fence: string,
    ): Result<string, Context>;
  }
}

/**
 * What a task's executions leave outside the task record, per task attempt: results too long to
 * ride in a job (the session's `results` hash) and the steps of an agent run (its `steps` hash).
 */
export class ExecutionRecords {
  constructor(
    private readonly redis: RedisConnection,
    private readonly prefix: string,
    private readonly historyMaxLength: number,
    private readonly now: () => Date,
  ) {
    defineScripts(redis, {
      orqAppendStep: [3, APPEND_STEP_SCRIPT],
      orqPutResult: [3, PUT_RESULT_SCRIPT],
    });
  }

  /**
   * Appends one step of an agent run inside a task (seed 004: plan, action, reflection,
   * revision) to the session history, exactly once per (taskId, attempt, step): a redelivered
   * job that writes a step again gets DUPLICATE and nothing is added. The steps are also kept
   * in the session's steps hash (one key per session, hash-tagged like the others), with the
   * plan current after a plan or revision, so a crashed run can resume from its last plan. The
   * only history write outside the coordinator: it touches no task or session state. GONE: the
   * session was deleted (a run still in flight), and nothing is written.
   */
  async appendTaskStep(
    sessionId: string,
    taskId: string,
    attempt: number,
    step: number,
    entry: HistoryEntryDraft,
    plan?: unknown,
  ): Promise<'OK' | 'DUPLICATE' | 'GONE'> {
    const stamped = HistoryEntry.parse({
      ...entry,
      taskId,
      timestamp: this.now().toISOString(),
      sessionId,
    });
    const record: TaskStepRecord = {
      step,
      entry: stamped,
      ...(plan === undefined ? {} : { plan }),
    };
    const status = await this.redis.orqAppendStep(
      this.keys(sessionId).steps,
      this.keys(sessionId).history,
      this.keys(sessionId).meta,
      stepCountField(taskId, attempt),
      step,
      `${stepCountField(taskId, attempt)}|${step}`,
      JSON.stringify(record),
      JSON.stringify(stamped),
      this.historyMaxLength,
    );
    if (status === 'OK' || status === 'DUPLICATE' || status === 'GONE') return status;
    throw new OrqError('CONFLICT', `Step ${step} of task ${taskId} skips earlier steps`, {
      details: { sessionId, taskId, attempt, step, status },
      hint: 'Steps are appended in order from 0; resume from loadTaskSteps().length.',
    });
  }

  /**
   * Stores one execution's result, too long to ride in its judge job (task-card.ts
   * inlineResult), for the judge and the coordinator to read (loadResult). Nothing is written
   * when GONE (the session was deleted: a late worker must not leave a key behind) or FENCED (a
   * later delivery of the attempt took a higher fence: this one's result would never be read).
   */
  async putResult(
    sessionId: string,
    taskId: string,
    attempt: number,
    result: TaskResult,
    fence?: number,
  ): Promise<'OK' | 'GONE' | 'FENCED'> {
    const keys = this.keys(sessionId);
    const status = await this.redis.orqPutResult(
      keys.meta,
      keys.results,
      keys.fences,
      resultField(taskId, attempt, fence),
      JSON.stringify(result),
      fenceField(taskId, attempt),
      fence === undefined ? '' : String(fence),
    );
    return status === 'OK' || status === 'FENCED' ? status : 'GONE';
  }

  /** The result putResult stored for one execution, if it is there. */
  async loadResult(
    sessionId: string,
    taskId: string,
    attempt: number,
    fence?: number,
  ): Promise<TaskResult | undefined> {
    const raw = await this.redis.hget(
      this.keys(sessionId).results,
      resultField(taskId, attempt, fence),
    );
    return raw ? TaskResult.parse(JSON.parse(raw)) : undefined;
  }

  /**
   * Removes the results putResult stored for a task attempt once its verdict (from the delivery
   * with `fence`) is recorded: that delivery's, and any an earlier delivery of the attempt
   * stored before it was superseded, which no one reads any more.
   */
  async dropResult(
    sessionId: string,
    taskId: string,
    attempt: number,
    fence?: number,
  ): Promise<void> {
    const fields = Array.from({ length: Math.max(1, fence ?? 1) }, (_, i) =>
      resultField(taskId, attempt, i + 1),
    );
    await this.redis.hdel(this.keys(sessionId).results, ...fields);
  }

  /** The steps appendTaskStep recorded for one execution attempt of a task, in order. */
  async loadTaskSteps(
    sessionId: string,
    taskId: string,
    attempt: number,
  ): Promise<TaskStepRecord[]> {
    const key = this.keys(sessionId).steps;
    const field = stepCountField(taskId, attempt);
    const count = Number((await this.redis.hget(key, field)) ?? 0);
    if (count === 0) return [];
    const fields = Array.from({ length: count }, (_, step) => `${field}|${step}`);
    const raw = (await this.redis.hmget(key, ...fields)).filter((r): r is string => r !== null);
    return raw.map((r) => {
      const parsed = JSON.parse(r) as { step: number; entry: unknown; plan?: unknown };
      return { ...parsed, entry: HistoryEntry.parse(parsed.entry) };
    });
  }

  private keys(sessionId: string) {
    return sessionKeys(this.prefix, sessionId);
  }
}

const stepCountField = (taskId: string, attempt: number) => `${taskId}|${attempt}`;
/**
 * One delivery's stored result: per fence too, so a stale delivery of the same attempt (paused
 * past its lock) cannot overwrite the result the current one's judge will read.
 */
const resultField = (taskId: string, attempt: number, fence?: number) =>
  `${taskId}|${attempt}${fenceSuffix(fence)}`;

/**
 * KEYS: meta, results, fences. ARGV: field, record, the attempt's field of `fences`, the
 * delivery's fence ('' for none). Writes only while the session exists, and only for a delivery
 * no later one of the same attempt has superseded.
 */
const PUT_RESULT_SCRIPT = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 'GONE' end
if ARGV[4] ~= '' then
  local latest = tonumber(redis.call('HGET', KEYS[3], ARGV[3]) or '0')
  if latest > tonumber(ARGV[4]) then return 'FENCED' end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 'OK'
`;

/**
 * KEYS: the steps hash, the session history stream. ARGV: count field, step, step field,
 * record, entry, maxlen. A step below the attempt's count was written before (DUPLICATE);
 * above it, one is missing (GAP).
 */
const APPEND_STEP_SCRIPT = `
if redis.call('EXISTS', KEYS[3]) == 0 then return 'GONE' end
local n = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
local step = tonumber(ARGV[2])
if step < n then return 'DUPLICATE' end
if step > n then return 'GAP' end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4], ARGV[1], n + 1)
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 'e', ARGV[5])
return 'OK'
`;
