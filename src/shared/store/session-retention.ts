import type { Result } from 'ioredis';
import { chunked } from '../chunked.js';
import { z } from 'zod';
import { FINISHED_SESSION_STATES, Session, SessionId, SessionState } from '../domain/session.js';
import { pipelineEach } from '../redis.js';
import { pruneVerdict, type PruneRule } from '../rules/retention.js';
import { DELETED_MARK_TTL_SECONDS, sessionIndexKey, sessionKeyList } from './keys.js';
import { definePendingResumeScripts, newestPendingResumeLua } from './pending-resumes.js';
import type { SessionStore } from './session-store.js';

/**
 * Deletes a finished session's keys in one step, so no reader sees half a session: the record
 * (KEYS[1]) names the state, and only a state in ARGV[1] (comma-separated) lets it go. With a
 * cutoff (ARGV[2], ms; '' for a person's delete, which goes regardless), a prune's delete also
 * keeps a session active since then: a history entry (KEYS[2]), or a resume recorded (KEYS[3])
 * and not applied (KEYS[4]) since, which writes no history until the coordinator applies it.
 * Checked here, not only in the prune's read: a resume may be asked for in between. The last
 * key is the session's `deleted` mark, set for ARGV[3] seconds in the same step: a submit that
 * read the id before the delete finds it and creates a new session instead (apply-script.ts).
 * A session already gone sets no mark (there is nothing to bring back), and answers NOT_FOUND
 * with one left by its delete or without. Returns {status, state, record JSON}; the record tells
 * the caller which idempotency key to release.
 */
const DELETE_SCRIPT = `
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'NOT_FOUND', '', ''} end
local finished = false
for s in string.gmatch(ARGV[1], '[^,]+') do
  if s == state then finished = true end
end
if not finished then return {'UNFINISHED', state, ''} end
if ARGV[2] ~= '' then
  local cutoff = tonumber(ARGV[2])
  local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
  if last and tonumber(string.match(last[1], '^%d+')) >= cutoff then
    return {'ACTIVE', state, ''}
  end
  if ${newestPendingResumeLua('KEYS[3]', 'KEYS[4]')} >= cutoff then
    return {'ACTIVE', state, ''}
  end
end
local data = redis.call('HGET', KEYS[1], 'data') or ''
redis.call('DEL', unpack(KEYS))
redis.call('SET', KEYS[#KEYS], '1', 'EX', ARGV[3])
return {'DELETED', state, data}
`;

declare module 'ioredis' {
  interface RedisCommander<Context> {
    orqDeleteSession(...keysThenArgs: string[]): Result<[string, string, string], Context>;
  }
}

export type DeleteOutcome =
  | { status: 'DELETED'; state: SessionState }
  | { status: 'NOT_FOUND' }
  /** Not finished: a running session's pods would still write to it. */
  | { status: 'UNFINISHED'; state: SessionState };

/** What a prune's delete (deleteSession with idleBeforeMs) may also answer. */
export type IdleDeleteOutcome =
  | DeleteOutcome
  /** Active since the cutoff (a history entry, or a resume not applied yet): kept. */
  | { status: 'ACTIVE'; state: SessionState };

/** The session's keys, those the delete script reads first (its KEYS[1..4]). */
function deleteKeys(store: SessionStore, sessionId: string): string[] {
  const keys = store.keys(sessionId);
  const read = [keys.meta, keys.history, keys.resumes, keys.applied];
  return [...read, ...sessionKeyList(keys).filter((key) => !read.includes(key))];
}

function defineScripts(store: SessionStore): void {
  const redis = store.redis;
  const commands = redis as unknown as Record<string, unknown>;
  if (typeof commands.orqDeleteSession !== 'function') {
    // Variadic: the key count is the first argument of each call.
    redis.defineCommand('orqDeleteSession', { lua: DELETE_SCRIPT });
  }
}

/**
 * Deletes a finished session: its record, tasks, history, outbox, usage and agent steps, then
 * its entry in the session index and the idempotency key that named it. The session's keys go
 * at once, leaving a mark that refuses a create of its id for a day; the index entry and the
 * key live elsewhere (another Redis Cluster slot) and follow. A crash in between leaves an index
 * entry that lists skip and the next prune drops, and a key that still names the session: the
 * next submit with it finds no session and starts a new one (client.ts, submitWithOutcome).
 * With `idleBeforeMs` (a prune's cutoff) a session active since then is kept (ACTIVE).
 */
export async function deleteSession(store: SessionStore, sessionId: string): Promise<DeleteOutcome>;
export async function deleteSession(
  store: SessionStore,
  sessionId: string,
  options: { idleBeforeMs: number },
): Promise<IdleDeleteOutcome>;
export async function deleteSession(
  store: SessionStore,
  sessionId: string,
  options?: { idleBeforeMs: number },
): Promise<IdleDeleteOutcome> {
  defineScripts(store);
  const keys = [...deleteKeys(store, sessionId), store.keys(sessionId).deleted];
  const [status, state, data] = await store.redis.orqDeleteSession(
    String(keys.length),
    ...keys,
    FINISHED_SESSION_STATES.join(','),
    options ? String(options.idleBeforeMs) : '',
    String(DELETED_MARK_TTL_SECONDS),
  );
  if (status === 'UNFINISHED' || status === 'ACTIVE') {
    return { status, state: SessionState.parse(state) };
  }
  const record = status === 'DELETED' ? recordFields(data) : {};
  if (record.idempotencyKey !== undefined) {
    await store.releaseIdempotencyKey(record.idempotencyKey, sessionId);
  }
  await store.unindexSession(sessionId, record.tenant);
  return status === 'DELETED'
    ? { status, state: SessionState.parse(state) }
    : { status: 'NOT_FOUND' };
}

/**
 * The idempotency key a stored session record was submitted with, and its tenant (no full
 * parse needed; a record from before tenants is the default tenant's).
 */
function recordFields(data: string): { idempotencyKey?: string; tenant?: string } {
  try {
    const record = JSON.parse(data) as { idempotencyKey?: unknown; tenant?: unknown };
    const tenant = Session.shape.tenant.safeParse(record.tenant);
    return {
      ...(typeof record.idempotencyKey === 'string'
        ? { idempotencyKey: record.idempotencyKey }
        : {}),
      ...(tenant.success ? { tenant: tenant.data } : {}),
    };
  } catch {
    return {};
  }
}

/** What a delete of a finished session answers: the session and the state it ended in. */
export const DeletedSession = z.object({ sessionId: SessionId, state: SessionState });
export type DeletedSession = z.infer<typeof DeletedSession>;

export interface PruneOptions extends PruneRule {
  /** Report what would go, delete nothing. */
  dryRun?: boolean;
}

export const PruneReport = z.object({
  /** Whether this was a dry run, which deleted nothing: a report must not be misread. */
  dryRun: z.boolean(),
  /** Sessions deleted (with dryRun: those that would be). */
  deleted: z.array(SessionId),
  /** Index entries of sessions whose records were already gone, dropped (or to drop). */
  unindexed: z.number().int().min(0),
});
export type PruneReport = z.infer<typeof PruneReport>;

/** Sessions looked at per round trip. */
const PRUNE_BATCH = 200;
/** Replies per session in a prune's pipeline: state, last history entry, newest resume. */
const READS = 3;

/**
 * Deletes the finished sessions that have been idle since before `cutoffMs` (retention.ts
 * decides). Only sessions created before the cutoff can qualify, so only those are read: one
 * pipelined round trip per batch for their states, last history entries and newest resumes not
 * applied yet. A session a resume is asked for, or moves on, between the read and its delete is
 * kept (not reported): the delete checks its state and activity again, at once with the delete.
 */
export async function pruneSessions(
  store: SessionStore,
  options: PruneOptions,
): Promise<PruneReport> {
  const report: PruneReport = { dryRun: options.dryRun === true, deleted: [], unindexed: 0 };
  definePendingResumeScripts(store);
  const candidates = await store.redis.zrangebyscore(
    sessionIndexKey(store.prefix),
    '-inf',
    `(${options.cutoffMs}`,
  );
  for (const batch of chunked(candidates, PRUNE_BATCH)) {
    const replies = await pipelineEach(store.redis, batch, (pipeline, id) => {
      const keys = store.keys(id);
      pipeline.hget(keys.meta, 'state');
      pipeline.xrevrange(keys.history, '+', '-', 'COUNT', 1);
      pipeline.orqNewestPendingResume(keys.resumes, keys.applied);
    });
    const unindex: string[] = [];
    for (const [i, id] of batch.entries()) {
      const [stateError, state] = replies[READS * i] ?? [null, null];
      const [historyError, last] = replies[READS * i + 1] ?? [null, []];
      const [resumeError, pendingResumeMs] = replies[READS * i + 2] ?? [null, 0];
      if (stateError || historyError || resumeError) continue;
      const parsedState = SessionState.safeParse(state);
      // A state this version does not know is kept: deleting what it cannot read is not its call.
      if (state !== null && !parsedState.success) continue;
      const lastId = (last as [string, string[]][])[0]?.[0];
      const verdict = pruneVerdict(
        {
          ...(parsedState.success ? { state: parsedState.data } : {}),
          ...(lastId ? { lastActivityMs: Number(lastId.split('-')[0]) } : {}),
          // 0: no resume waits for the coordinator.
          ...(Number(pendingResumeMs) > 0 ? { pendingResumeMs: Number(pendingResumeMs) } : {}),
        },
        options,
      );
      if (verdict === 'unindex') unindex.push(id);
      if (verdict !== 'delete') continue;
      if (options.dryRun) {
        report.deleted.push(id);
        continue;
      }
      const outcome = await deleteSession(store, id, { idleBeforeMs: options.cutoffMs });
      if (outcome.status === 'DELETED') report.deleted.push(id);
    }
    report.unindexed += unindex.length;
    if (!options.dryRun && unindex.length > 0) {
      await store.redis.zrem(sessionIndexKey(store.prefix), ...unindex);
    }
  }
  return report;
}
