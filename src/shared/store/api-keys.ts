import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { TenantId } from '../domain/session.js';
import { OrqError } from '../errors.js';
import type { RedisConnection } from '../redis.js';

/**
 * Per-tenant API keys (issue 41): a key lets its holder submit sessions for its tenant and see,
 * cancel, resume and delete only that tenant's sessions. Redis holds a SHA-256 of each key,
 * never the key: the hash of a random 32-byte secret needs no salt or slow hash to resist
 * guessing. The key is shown once, when it is created.
 */

/** What a key may do besides reading and driving its tenant's sessions. */
export const KeyRight = z.enum(['answer']);
export type KeyRight = z.infer<typeof KeyRight>;

export const ApiKeyRecord = z.strictObject({
  /** Short public id, for listing and revoking; also the key's visible start. */
  id: z.string().regex(/^[a-f0-9]{12}$/),
  tenant: TenantId,
  label: z.string().max(200).optional(),
  createdAt: z.iso.datetime(),
  /** Rights beyond its tenant's sessions: `answer` approves, edits or rejects their plans (issue 48). */
  rights: z.array(KeyRight).default([]),
});
export type ApiKeyRecord = z.infer<typeof ApiKeyRecord>;

/** `orq_<id>_<secret>`: the prefix says what it is in a leak scan; the id names it. */
const KEY_FORMAT = /^orq_([a-f0-9]{12})_([A-Za-z0-9_-]{43})$/;

const hashOf = (key: string): string => createHash('sha256').update(key).digest('hex');

export class ApiKeyStore {
  constructor(
    private readonly redis: RedisConnection,
    private readonly prefix: string,
  ) {}

  /** hash(key) → record; and id → hash, so a key is revoked by its id. */
  private get byHash() {
    return `${this.prefix}:apikeys:byhash`;
  }
  private get byId() {
    return `${this.prefix}:apikeys:byid`;
  }

  /** A new key for `tenant`: the key itself is returned here only. */
  async create(
    tenant: string,
    label?: string,
    rights: readonly KeyRight[] = [],
  ): Promise<{ key: string; record: ApiKeyRecord }> {
    const record = ApiKeyRecord.parse({
      id: randomBytes(6).toString('hex'),
      tenant,
      ...(label ? { label } : {}),
      ...(rights.length > 0 ? { rights } : {}),
      createdAt: new Date().toISOString(),
    });
    const key = `orq_${record.id}_${randomBytes(32).toString('base64url')}`;
    const hash = hashOf(key);
    await this.redis
      .multi()
      .hset(this.byHash, hash, JSON.stringify(record))
      .hset(this.byId, record.id, hash)
      .exec();
    return { key, record };
  }

  async list(): Promise<ApiKeyRecord[]> {
    const all = await this.redis.hvals(this.byHash);
    return all
      .map((json) => ApiKeyRecord.parse(JSON.parse(json)))
      .sort((a, b) => a.tenant.localeCompare(b.tenant) || a.createdAt.localeCompare(b.createdAt));
  }

  async revoke(id: string): Promise<ApiKeyRecord> {
    const hash = await this.redis.hget(this.byId, id);
    const json = hash ? await this.redis.hget(this.byHash, hash) : null;
    if (!hash || !json) {
      throw new OrqError('NOT_FOUND', `no API key with id ${id}`, {
        hint: 'List the keys with `orq keys list`.',
      });
    }
    await this.redis.multi().hdel(this.byHash, hash).hdel(this.byId, id).exec();
    return ApiKeyRecord.parse(JSON.parse(json));
  }

  /** The record of a presented key, if it is one and not revoked. */
  async lookup(key: string): Promise<ApiKeyRecord | undefined> {
    if (!KEY_FORMAT.test(key)) return undefined;
    const json = await this.redis.hget(this.byHash, hashOf(key));
    return json ? ApiKeyRecord.parse(JSON.parse(json)) : undefined;
  }
}
