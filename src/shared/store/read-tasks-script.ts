import type { Result } from 'ioredis';
import { Task } from '../domain/task.js';
import type { UnsettledUsage } from '../queues.js';
import type { SessionKeys } from './keys.js';
import type { TaskSnapshot } from './session-records.js';
import { ADD_USAGE_LUA, unsettledUsageArgs } from './usage-store.js';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** KEYS and ARGV as READ_TASKS_SCRIPT documents them (readTasksArgs). */
    orqReadTasks(keysThenArgs: (string | number)[]): Result<(string | null)[], Context>;
  }
}

/**
 * The one read of a session's tasks, with its state when asked: SessionReads.loadForTask reads a
 * few for task-level work, TaskReads.loadTasks many in slices.
 *
 * KEYS: meta, tasks, taskVersions, usage, applied, fences. ARGV[1]: '1' to include the session
 * record; ARGV[2]: an id under which to count usage ('' for none), ARGV[3]: n usages, ARGV[4]: m
 * task ids, ARGV[5]: a field of `fences` to take the next fence of ('' for none), then the
 * usages' 6 × n arguments (unsettledUsageArgs), then the m ids, then m versions the caller
 * holds ('' for none): a task still at the version held comes back without its record (false),
 * so a role whose job carries the task checks it without reading it. The usage is counted, and
 * the fence taken, only while the session exists; the usage only when the id is new in `applied`
 * (a read repeated by a redelivered job counts nothing).
 * Returns state, version, open, active, config revision, data (or false), then the tasks'
 * records, then their versions, then the fence taken (false for none): one consistent snapshot
 * in one round trip.
 */
export const READ_TASKS_SCRIPT = `${ADD_USAGE_LUA}
local meta = redis.call('HMGET', KEYS[1], 'state', 'version', 'open', 'active', 'rev')
local reply = {meta[1], meta[2], meta[3], meta[4], meta[5] or '0', false}
if ARGV[1] == '1' then reply[6] = redis.call('HGET', KEYS[1], 'data') end
local nUsage = tonumber(ARGV[3])
local first = 6 + 6 * nUsage
local n = tonumber(ARGV[4])
if meta[1] and ARGV[2] ~= '' and redis.call('SADD', KEYS[5], ARGV[2]) == 1 then
  addUnsettledUsage(KEYS[4], 6, nUsage)
end
if n > 0 then
  local ids = {unpack(ARGV, first, first + n - 1)}
  local versions = redis.call('HMGET', KEYS[3], unpack(ids))
  local wanted = {}
  for i = 1, n do
    -- A caller that holds the task at its current version gets no record: a version check.
    if versions[i] and versions[i] == ARGV[first + n + i - 1] then
      reply[6 + i] = false
    else
      reply[6 + i] = true
      wanted[#wanted + 1] = ids[i]
    end
  end
  if #wanted > 0 then
    local records = redis.call('HMGET', KEYS[2], unpack(wanted))
    local k = 0
    for i = 1, n do
      if reply[6 + i] then k = k + 1; reply[6 + i] = records[k] end
    end
  end
  for i = 1, n do reply[6 + n + i] = versions[i] end
end
reply[7 + 2 * n] = false
if meta[1] and ARGV[5] ~= '' then reply[7 + 2 * n] = redis.call('HINCRBY', KEYS[6], ARGV[5], 1) end
return reply
`;

/** READ_TASKS_SCRIPT's keys and arguments. */
export function readTasksArgs(
  keys: SessionKeys,
  taskIds: readonly string[],
  withData: '0' | '1',
  count?: { id: string; usage: readonly UnsettledUsage[] },
  held?: ReadonlyMap<string, number>,
  fence?: string,
): (string | number)[] {
  const args: (string | number)[] = [keys.meta, keys.tasks, keys.taskVersions, keys.usage];
  args.push(keys.applied, keys.fences, withData, count?.id ?? '', count?.usage.length ?? 0);
  args.push(taskIds.length, fence ?? '');
  if (count) args.push(...unsettledUsageArgs(count.usage));
  for (const id of taskIds) args.push(id);
  for (const id of taskIds) args.push(String(held?.get(id) ?? ''));
  return args;
}

/** Records then versions of `taskIds`, as READ_TASKS_SCRIPT returns them; absent ones left out. */
export function tasksFromReply(
  taskIds: readonly string[],
  values: (string | null)[],
): Map<string, TaskSnapshot> {
  const result = new Map<string, TaskSnapshot>();
  taskIds.forEach((id, i) => {
    const raw = values[i];
    if (raw) {
      const version = Number(values[taskIds.length + i] ?? 0);
      result.set(id, { task: Task.parse(JSON.parse(raw)), version });
    }
  });
  return result;
}
