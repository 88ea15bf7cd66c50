import { HistoryEntry } from '../domain/history.js';
import type { RedisConnection } from '../redis.js';
import { sessionKeys } from './keys.js';
import type { StoredHistoryEntry } from './session-records.js';

/**
 * Reads of a session's history (its `history` stream). Entries are written with the transition
 * they record (ChangesetWriter) or with an agent run's step (ExecutionRecords.appendTaskStep).
 */
export class SessionHistory {
  constructor(
    private readonly redis: RedisConnection,
    private readonly prefix: string,
  ) {}

  /** The entries after the cursor `after` (from the first when absent), `count` at most. */
  async read(
    sessionId: string,
    options: { after?: string; count?: number } = {},
  ): Promise<StoredHistoryEntry[]> {
    const key = sessionKeys(this.prefix, sessionId).history;
    const start = options.after ? `(${options.after}` : '-';
    const raw = options.count
      ? await this.redis.xrange(key, start, '+', 'COUNT', options.count)
      : await this.redis.xrange(key, start, '+');
    return raw.map(([id, fields]) => ({ id, entry: parseHistoryFields(fields) }));
  }

  /** The id of the session's newest history entry (a cursor for what comes next). */
  async lastId(sessionId: string): Promise<string | undefined> {
    const key = sessionKeys(this.prefix, sessionId).history;
    const [last] = await this.redis.xrevrange(key, '+', '-', 'COUNT', 1);
    return last?.[0];
  }
}

/** The entry of one stream record's fields (`e`: the entry's JSON). */
export function parseHistoryFields(fields: string[]): HistoryEntry {
  const index = fields.indexOf('e');
  const raw = index >= 0 ? fields[index + 1] : undefined;
  return HistoryEntry.parse(JSON.parse(raw ?? '{}'));
}
