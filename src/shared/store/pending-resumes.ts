import type { Result } from 'ioredis';
import { SessionState } from '../domain/session.js';
import type { SessionStore } from './session-store.js';
import { defineScripts } from '../redis.js';

/**
 * A resume or a cancel is a coordinator event: between its enqueueing and the coordinator's
 * apply the session still shows the state from before it (BLOCKED, BUDGET_EXHAUSTED), and a
 * watch started meanwhile would take that for the end. The client records each such request it
 * enqueues in the session's `resumes` hash (named when it held resumes only); the apply script
 * adds the event id to `applied` in the same write that moves the session, so "recorded and
 * not applied" is exact at any moment, with no change to the coordinator's write path.
 */

/**
 * Records a resume or cancel event as pending (KEYS meta, resumes, applied; ARGV eventId, enqueued-at ms).
 * Nothing for a deleted session (no key of it is written again), nor for an event applied
 * already. Drops the records of events applied since, so the hash holds what still waits.
 */
const MARK_SCRIPT = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do
  if redis.call('SISMEMBER', KEYS[3], id) == 1 then redis.call('HDEL', KEYS[2], id) end
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
`;

/**
 * Lua: when the newest resume (or cancel) recorded and not applied yet was enqueued (ms; 0: none), from the
 * resumes hash and the applied set named. Retention reads it (NEWEST_SCRIPT) and its delete
 * script checks it again, so both mean the same by "pending".
 */
export function newestPendingResumeLua(resumes: string, applied: string): string {
  return `(function()
  local newest = 0
  local records = redis.call('HGETALL', ${resumes})
  for i = 1, #records, 2 do
    local at = tonumber(records[i + 1]) or 0
    if at > newest and redis.call('SISMEMBER', ${applied}, records[i]) == 0 then newest = at end
  end
  return newest
end)()`;
}

/** When the newest pending resume was enqueued (KEYS resumes, applied); 0 when there is none. */
const NEWEST_SCRIPT = `return ${newestPendingResumeLua('KEYS[1]', 'KEYS[2]')}`;

/**
 * The session's state and the resume and cancel events recorded but not applied, read at one moment
 * (KEYS meta, resumes, applied). Empty for a session that does not exist.
 */
const READ_SCRIPT = `
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {} end
local reply = {state}
for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do
  if redis.call('SISMEMBER', KEYS[3], id) == 0 then reply[#reply + 1] = id end
end
return reply
`;

declare module 'ioredis' {
  interface RedisCommander<Context> {
    orqMarkResume(
      meta: string,
      resumes: string,
      applied: string,
      eventId: string,
      at: number,
    ): Result<number, Context>;
    orqReadSettling(meta: string, resumes: string, applied: string): Result<string[], Context>;
    orqNewestPendingResume(resumes: string, applied: string): Result<number, Context>;
  }
}

/** Defines this module's scripts on the store's connection (so pipelines may call them). */
export function definePendingResumeScripts(store: SessionStore): void {
  defineScripts(store.redis, {
    orqMarkResume: [3, MARK_SCRIPT],
    orqReadSettling: [3, READ_SCRIPT],
    orqNewestPendingResume: [2, NEWEST_SCRIPT],
  });
}

/** Records an enqueued resume or cancel event until the coordinator applies it. */
export async function markRequestPending(
  store: SessionStore,
  sessionId: string,
  eventId: string,
  now: number = Date.now(),
): Promise<void> {
  definePendingResumeScripts(store);
  const keys = store.keys(sessionId);
  await store.redis.orqMarkResume(keys.meta, keys.resumes, keys.applied, eventId, now);
}

export interface SettlingState {
  /** Undefined when the session does not exist (or was deleted). */
  state: SessionState | undefined;
  /** Event ids of the resumes and cancels enqueued and not applied yet. */
  pendingRequests: string[];
}

/** The session's state with the requests still waiting for the coordinator, in one read. */
export async function readSettling(store: SessionStore, sessionId: string): Promise<SettlingState> {
  definePendingResumeScripts(store);
  const keys = store.keys(sessionId);
  const [state, ...pendingRequests] = await store.redis.orqReadSettling(
    keys.meta,
    keys.resumes,
    keys.applied,
  );
  return { state: state === undefined ? undefined : SessionState.parse(state), pendingRequests };
}

/**
 * Forgets requests whose jobs ended without applying them (failed for good, or removed): they
 * never will be, and every idle poll of a watch would look each one's job up again. Only for
 * records read after their job was added (markRequestPending runs after the add), so a job
 * BullMQ does not know is gone, not about to be added. HDEL writes nothing when the record
 * or the session is gone already.
 */
export async function dropPendingRequests(
  store: SessionStore,
  sessionId: string,
  eventIds: readonly string[],
): Promise<void> {
  if (eventIds.length === 0) return;
  await store.redis.hdel(store.keys(sessionId).resumes, ...eventIds);
}
