import { z } from 'zod';
import { Session } from '../domain/session.js';
import { OrqError } from '../errors.js';
import { pipelineEach, type RedisConnection } from '../redis.js';
import {
  sessionIndexKey,
  sessionKeys,
  tenantIndexBuiltKey,
  tenantSessionIndexKey,
} from './keys.js';

/**
 * The sessions by creation time, newest first: one sorted set of all of them, and one per
 * tenant, so a tenant's listing reads its own sessions only and every page is full (issue 41).
 * Both are scored by creation time (ms); Redis orders equal scores by id, which makes (score, id)
 * a position that stays right whatever is added or deleted around it: the cursor.
 */

/** Where a page ends: the creation time (ms) and id of its last session. */
export interface ListCursor {
  score: number;
  id: string;
}

/** `<ms>.<session id>`, as the HTTP API and the client pass it on. */
export const ListCursorText = z
  .string()
  .regex(/^\d{1,16}\.[A-Za-z0-9_-]{1,128}$/, 'a cursor is the `next` a listing answered');

export const formatCursor = (cursor: ListCursor): string => `${cursor.score}.${cursor.id}`;

export function parseCursor(text: string): ListCursor {
  const parsed = ListCursorText.safeParse(text);
  if (!parsed.success) {
    throw new OrqError('VALIDATION_FAILED', `"${text}" is not a listing cursor`, {
      hint: 'Pass the cursor a listing answered (its Link header\'s rel="next", or the client\'s page.next)',
    });
  }
  const dot = text.indexOf('.');
  return { score: Number(text.slice(0, dot)), id: text.slice(dot + 1) };
}

export interface IndexPageRequest {
  limit: number;
  /** Entries skipped after the cursor (or from the newest). */
  offset?: number;
  after?: ListCursor;
  /** Only this tenant's sessions. */
  tenant?: string;
}

/** Index entries read per round trip when a tenant's index is built from the global one. */
const BACKFILL_BATCH = 500;

type Entry = ListCursor;

function entries(reply: string[]): Entry[] {
  const out: Entry[] = [];
  for (let i = 0; i + 1 < reply.length; i += 2) {
    out.push({ id: reply[i]!, score: Number(reply[i + 1]) });
  }
  return out;
}

export class SessionIndex {
  constructor(
    private readonly redis: RedisConnection,
    private readonly prefix: string,
  ) {}

  async add(session: { id: string; tenant: string; createdAt: string }): Promise<void> {
    const score = Date.parse(session.createdAt);
    await Promise.all([
      this.redis.zadd(sessionIndexKey(this.prefix), score, session.id),
      this.redis.zadd(tenantSessionIndexKey(this.prefix, session.tenant), score, session.id),
    ]);
  }

  /**
   * Drops a session's entries. Without its tenant (a record already gone) only the global one:
   * its tenant's entry then names no session, and listings pass over it.
   */
  async remove(sessionId: string, tenant?: string): Promise<void> {
    await Promise.all([
      this.redis.zrem(sessionIndexKey(this.prefix), sessionId),
      ...(tenant ? [this.redis.zrem(tenantSessionIndexKey(this.prefix, tenant), sessionId)] : []),
    ]);
  }

  /**
   * Up to `limit` entries in listing order (newest first) after the cursor, `offset` of them
   * skipped. Entries with the cursor's own score come first: those with a smaller id.
   */
  async page(request: IndexPageRequest): Promise<Entry[]> {
    if (request.tenant !== undefined) await this.buildTenantIndexes();
    const key =
      request.tenant === undefined
        ? sessionIndexKey(this.prefix)
        : tenantSessionIndexKey(this.prefix, request.tenant);
    const offset = request.offset ?? 0;
    const { after, limit } = request;
    if (!after) {
      return entries(await this.redis.zrevrange(key, offset, offset + limit - 1, 'WITHSCORES'));
    }
    const ties = entries(
      await this.redis.zrevrangebyscore(key, after.score, after.score, 'WITHSCORES'),
    ).filter((entry) => entry.id < after.id);
    const fromTies = ties.slice(offset, offset + limit);
    const rest = limit - fromTies.length;
    if (rest === 0) return fromTies;
    const older = await this.redis.zrevrangebyscore(
      key,
      `(${after.score}`,
      '-inf',
      'WITHSCORES',
      'LIMIT',
      Math.max(0, offset - ties.length),
      rest,
    );
    return [...fromTies, ...entries(older)];
  }

  /**
   * Builds the tenants' indexes from the global one, once per Redis: sessions stored before
   * there were tenant indexes are in the global one only. Repeating it (two processes at once)
   * adds nothing twice; a session deleted meanwhile may be left in its tenant's index, where a
   * listing passes over it. The mark is read on every tenant listing (one EXISTS), so deleting
   * it has them built again.
   */
  private async buildTenantIndexes(): Promise<void> {
    const marker = tenantIndexBuiltKey(this.prefix);
    if ((await this.redis.exists(marker)) === 1) return;
    const all = entries(await this.redis.zrange(sessionIndexKey(this.prefix), 0, -1, 'WITHSCORES'));
    for (let start = 0; start < all.length; start += BACKFILL_BATCH) {
      const batch = all.slice(start, start + BACKFILL_BATCH);
      const replies = await pipelineEach(this.redis, batch, (pipeline, entry) => {
        pipeline.hget(sessionKeys(this.prefix, entry.id).meta, 'data');
      });
      await Promise.all(
        batch.map((entry, i) => {
          const tenant = tenantOf(replies[i]?.[1]);
          return tenant === undefined
            ? undefined
            : this.redis.zadd(tenantSessionIndexKey(this.prefix, tenant), entry.score, entry.id);
        }),
      );
    }
    await this.redis.set(marker, String(Date.now()));
  }
}

/** The tenant of a stored session record (the default one for a record from before tenants). */
function tenantOf(data: unknown): string | undefined {
  if (typeof data !== 'string') return undefined;
  try {
    const parsed = Session.shape.tenant.safeParse(
      (JSON.parse(data) as { tenant?: unknown }).tenant,
    );
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
