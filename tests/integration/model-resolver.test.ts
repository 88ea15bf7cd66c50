import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Session } from '../../src/shared/domain/session.js';
import { sessionKeys } from '../../src/shared/store/keys.js';
import { UsageStore } from '../../src/shared/store/usage-store.js';
import { ModelResolver } from '../../src/workers/models.js';
import { makeSession, runningTask } from '../support/executors.js';

let redis: Redis;
let usageStore: UsageStore;
const prefix = `mr${randomUUID().slice(0, 8)}`;

beforeAll(() => {
  redis = new Redis(inject('redisUrl'));
  usageStore = new UsageStore(redis, prefix);
});
afterAll(() => redis.disconnect());

/** A session with a record: the usage scripts count nothing for a session without one. */
async function stored(session: Session): Promise<Session> {
  await redis.hset(sessionKeys(prefix, session.id).meta, 'state', 'RUNNING');
  return session;
}

const execute = (models: Awaited<ReturnType<ModelResolver['forSession']>>, session: Session) =>
  models.execute({
    sessionId: session.id,
    task: runningTask,
    attempt: 1,
    dependencyResults: [],
    instruction: session.instruction,
  });

describe('ModelResolver.forSession', () => {
  it('builds a role’s metered models once per session record, not once per job', async () => {
    const resolver = new ModelResolver({ usageStore });
    const session = await stored(makeSession());
    const first = await resolver.forSession(session, 'worker');
    // Each job gets the session as a copy with its current state (SessionStore.loadForTask).
    expect(await resolver.forSession({ ...session, state: 'RUNNING' }, 'worker')).toBe(first);
    expect(await resolver.forSession(session, 'judge')).not.toBe(first);
  });

  it('meters a second session that shares the config object under its own id', async () => {
    const resolver = new ModelResolver({ usageStore });
    const a = await stored(makeSession());
    const b = await stored({ ...makeSession(), config: a.config });
    await resolver.forSession(a, 'worker');
    await execute(await resolver.forSession(b, 'worker'), b);
    expect((await usageStore.read(b.id)).byRole.worker?.calls).toBe(1);
    expect((await usageStore.read(a.id)).byRole.worker).toBeUndefined();
  });

  it('builds anew for a new record of the session, so a changed budget applies', async () => {
    const resolver = new ModelResolver({ usageStore });
    const session = await stored(makeSession());
    await execute(await resolver.forSession(session, 'worker'), session);
    // A raised (here: lowered) budget is a new record, read into a new config object.
    const limited = {
      ...session,
      config: { ...session.config, budget: { ...session.config.budget, maxTokens: 1 } },
    };
    await expect(
      execute(await resolver.forSession(limited, 'worker'), limited),
    ).rejects.toMatchObject({ code: 'BUDGET_EXHAUSTED' });
  });
});
