import { ADD_USAGE_LUA } from './usage-store.js';

/**
 * The one write path of orq's state. Decisions are computed in TypeScript from a snapshot;
 * this script checks that the snapshot still holds (event not applied yet, session state,
 * versions, counters) and then writes everything at once: records, counters, outbox jobs,
 * history entries and the applied mark.
 *
 * The changeset comes as flat arguments, not one JSON document: records and history entries
 * are JSON already, and passing them as they are spares Node an escaping pass and Lua a decode.
 *
 * KEYS: meta, tasks, taskVersions, outbox, applied, history, usage, deleted, ready, fences.
 * ARGV (built by applyArgs in changeset-writer.ts):
 *   1 eventId              2 required states, comma-separated ('' = any)
 *   3 expected session version ('' = no session write)
 *   4 session record JSON   5 session state
 *   6 required open ('' = any)   7 required active ('' = any)
 *   8 open delta            9 active delta       10 history max length
 *   11 '1' when the session's budget was raised: the usage hash forgets its refusal and the
 *      session's config revision moves on (readers re-read the record)
 *   12..16 counts: expected versions E, task writes T, outbox jobs O, history entries H,
 *   unsettled usages U
 *   then E × (taskId, version), T × (taskId, record, new version), O × (jobId, job), H × entry,
 *   U × six fields (unsettledUsageArgs): calls counted with this write, so with it only once,
 *   then the slot limit ('' = none) and T waiting scores, one per task write in order ('' = the
 *   task is not waiting for a slot: it leaves the ready set), then a field of `fences` ('' = no
 *   check) and the fence the event's delivery took: below the field's value, a later delivery
 *   of the same work job has started since, and the event is refused as FENCED (keys.ts);
 *   last, the session's integration phase ('' = none), kept in meta's `phase` for /metrics.
 * With a slot limit (scheduling.maxTasksInFlight) the write must leave the session's active
 * count at most the limit when it raises it, and must not leave a slot free while a task waits
 * for one: either means the transition read a stale count or ready set (a concurrent
 * coordinator), and is refused as CONFLICT so it decides again.
 * Returns {status, open, active}; status is OK, DUPLICATE, STATE, CONFLICT, COUNTERS, FENCED
 * or GONE.
 * GONE: the session was deleted (or never created); only its creation (expected version 0) may
 * write to a session without a record, so a late event cannot bring a deleted one's keys back.
 * Its creation is GONE too while the delete's mark (KEYS[8]) lasts: a submit that read the id
 * before the delete must not bring it back either. Only creations look (one EXISTS).
 */
export const APPLY_SCRIPT = `${ADD_USAGE_LUA}
local function counters()
  local r = redis.call('HMGET', KEYS[1], 'open', 'active')
  return tonumber(r[1] or '0') or 0, tonumber(r[2] or '0') or 0
end
local function reply(status)
  local o, a = counters()
  return {status, o, a}
end

if redis.call('SISMEMBER', KEYS[5], ARGV[1]) == 1 then return reply('DUPLICATE') end
if ARGV[3] ~= '0' and redis.call('EXISTS', KEYS[1]) == 0 then return {'GONE', 0, 0} end
if ARGV[3] == '0' and redis.call('EXISTS', KEYS[8]) == 1 then return {'GONE', 0, 0} end

if ARGV[2] ~= '' then
  local state = redis.call('HGET', KEYS[1], 'state')
  local ok = false
  for s in string.gmatch(ARGV[2], '[^,]+') do
    if s == state then ok = true end
  end
  if not ok then return reply('STATE') end
end

local sessionVersion = tonumber(ARGV[3])
if sessionVersion then
  local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0') or 0
  if v ~= sessionVersion then return reply('CONFLICT') end
end

local nExpect, nTasks, nOutbox, nHistory = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
local nUsage = tonumber(ARGV[16])
local slotsAt = 17 + 2 * nExpect + 3 * nTasks + 2 * nOutbox + nHistory + 6 * nUsage
local slotLimit = tonumber(ARGV[slotsAt])
local fenceAt = slotsAt + nTasks + 1
if ARGV[fenceAt] ~= '' then
  local current = tonumber(redis.call('HGET', KEYS[10], ARGV[fenceAt]) or '0') or 0
  if tonumber(ARGV[fenceAt + 1]) < current then return reply('FENCED') end
end
local at = 17
for _ = 1, nExpect do
  local v = tonumber(redis.call('HGET', KEYS[3], ARGV[at]) or '0') or 0
  if v ~= tonumber(ARGV[at + 1]) then return reply('CONFLICT') end
  at = at + 2
end

if ARGV[6] ~= '' or ARGV[7] ~= '' then
  local o, a = counters()
  if ARGV[6] ~= '' and tonumber(ARGV[6]) ~= o then return reply('COUNTERS') end
  if ARGV[7] ~= '' and tonumber(ARGV[7]) ~= a then return reply('COUNTERS') end
end

if slotLimit then
  local _, a = counters()
  local after = a + tonumber(ARGV[9])
  if tonumber(ARGV[9]) > 0 and after > slotLimit then return reply('CONFLICT') end
  if after < slotLimit then
    -- What the ready set will hold once the writes below are done: checked before them, as a
    -- script's writes cannot be taken back.
    local waiting = redis.call('ZCARD', KEYS[9])
    local taskAt = 17 + 2 * nExpect
    for i = 1, nTasks do
      local present = redis.call('ZSCORE', KEYS[9], ARGV[taskAt + 3 * (i - 1)])
      local leaves = ARGV[slotsAt + i] == ''
      if leaves and present then waiting = waiting - 1 end
      if not leaves and not present then waiting = waiting + 1 end
    end
    if waiting > 0 then return reply('CONFLICT') end
  end
end

if sessionVersion then
  redis.call('HSET', KEYS[1], 'data', ARGV[4], 'version', sessionVersion + 1, 'state', ARGV[5])
  local phase = ARGV[fenceAt + 2]
  if phase and phase ~= '' then
    redis.call('HSET', KEYS[1], 'phase', phase)
  else
    redis.call('HDEL', KEYS[1], 'phase')
  end
end
for _ = 1, nTasks do
  redis.call('HSET', KEYS[2], ARGV[at], ARGV[at + 1])
  redis.call('HSET', KEYS[3], ARGV[at], ARGV[at + 2])
  at = at + 3
end
if ARGV[11] == '1' then
  redis.call('HDEL', KEYS[7], 'exhausted', 'exhausted_grants')
  redis.call('HINCRBY', KEYS[1], 'rev', 1)
end
if ARGV[8] ~= '0' then redis.call('HINCRBY', KEYS[1], 'open', ARGV[8]) end
if ARGV[9] ~= '0' then redis.call('HINCRBY', KEYS[1], 'active', ARGV[9]) end
for _ = 1, nOutbox do
  redis.call('HSET', KEYS[4], ARGV[at], ARGV[at + 1])
  at = at + 2
end
for _ = 1, nHistory do
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[10], '*', 'e', ARGV[at])
  at = at + 1
end
addUnsettledUsage(KEYS[7], at, nUsage)
local taskAt = 17 + 2 * nExpect
for i = 1, nTasks do
  local id = ARGV[taskAt + 3 * (i - 1)]
  local score = ARGV[slotsAt + i]
  if score == '' then redis.call('ZREM', KEYS[9], id) else redis.call('ZADD', KEYS[9], score, id) end
end
redis.call('SADD', KEYS[5], ARGV[1])
return reply('OK')
`;
