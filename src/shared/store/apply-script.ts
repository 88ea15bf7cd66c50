/**
 * The one write path of orq's state. Decisions are computed in TypeScript from a snapshot;
 * this script checks that the snapshot still holds (event not applied yet, session state,
 * versions, counters) and then writes everything at once: records, counters, outbox jobs,
 * history entries and the applied mark.
 *
 * KEYS: meta, tasks, taskVersions, outbox, applied, history. ARGV[1]: the changeset JSON.
 * Returns {status, open, active}; status is OK, DUPLICATE, STATE, CONFLICT or COUNTERS.
 */
export const APPLY_SCRIPT = `
local cs = cjson.decode(ARGV[1])
local function counters()
  local r = redis.call('HMGET', KEYS[1], 'open', 'active')
  return tonumber(r[1] or '0') or 0, tonumber(r[2] or '0') or 0
end
local function reply(status)
  local o, a = counters()
  return {status, o, a}
end

if redis.call('SISMEMBER', KEYS[5], cs.eventId) == 1 then return reply('DUPLICATE') end

if cs.requireStates then
  local state = redis.call('HGET', KEYS[1], 'state')
  local ok = false
  for _, s in ipairs(cs.requireStates) do
    if s == state then ok = true end
  end
  if not ok then return reply('STATE') end
end

if cs.sessionVersion then
  local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0') or 0
  if v ~= cs.sessionVersion then return reply('CONFLICT') end
end

for _, e in ipairs(cs.expect) do
  local v = tonumber(redis.call('HGET', KEYS[3], e[1]) or '0') or 0
  if v ~= e[2] then return reply('CONFLICT') end
end

if cs.requireCounters then
  local o, a = counters()
  if cs.requireCounters.open and cs.requireCounters.open ~= o then return reply('COUNTERS') end
  if cs.requireCounters.active and cs.requireCounters.active ~= a then return reply('COUNTERS') end
end

if cs.session then
  redis.call('HSET', KEYS[1], 'data', cs.session, 'version', cs.sessionVersion + 1, 'state', cs.sessionState)
end
for _, w in ipairs(cs.tasks) do
  redis.call('HSET', KEYS[2], w[1], w[2])
  redis.call('HSET', KEYS[3], w[1], w[3])
end
if cs.counters then
  if cs.counters.open and cs.counters.open ~= 0 then redis.call('HINCRBY', KEYS[1], 'open', cs.counters.open) end
  if cs.counters.active and cs.counters.active ~= 0 then redis.call('HINCRBY', KEYS[1], 'active', cs.counters.active) end
end
for _, j in ipairs(cs.outbox) do
  redis.call('HSET', KEYS[4], j[1], j[2])
end
for _, h in ipairs(cs.history) do
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', cs.historyMaxLength, '*', 'e', h)
end
redis.call('SADD', KEYS[5], cs.eventId)
return reply('OK')
`;
