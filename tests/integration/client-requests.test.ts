import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { moveSession } from '../support/session-state.js';

// No roles: the sessions stay PLANNING, which is all these requests need.
let cluster: TestCluster;
let sessionId: string;

beforeAll(async () => {
  cluster = await startCluster({ pods: 0 });
  sessionId = (await cluster.client.submit({ instruction: 'one' })).id;
  await cluster.client.submit({ instruction: 'two' });
}, 30_000);

afterAll(async () => {
  await cluster?.close();
});

const refusal = (what: string, path: string) => ({
  code: 'VALIDATION_FAILED',
  // `limit: …`, or an unknown key named by itself: `unknown key "limt" at the top level`.
  message: expect.stringMatching(
    new RegExp(`^Invalid ${what}: (${path}: |unknown key "${path}" at the top level)`),
  ) as string,
  issues: [expect.objectContaining({ path })],
});

describe("the client's read and cancel options", () => {
  it('refuses a list page that is not one, naming the field, rather than a Redis error or another page', async () => {
    const { client } = cluster;
    // A limit of 0 read every session; -1 none; an offset of -1 the oldest; 1.5 a Redis error.
    for (const [options, path] of [
      [{ limit: 0 }, 'limit'],
      [{ limit: -1 }, 'limit'],
      [{ limit: 1.5 }, 'limit'],
      [{ limit: '2' }, 'limit'],
      [{ offset: -1 }, 'offset'],
      [{ limt: 1 }, 'limt'],
    ] as const) {
      await expect(client.list(options as never), JSON.stringify(options)).rejects.toMatchObject(
        refusal('list options', path),
      );
    }
    expect(await client.list({ limit: 1 })).toHaveLength(1);
  });

  it('refuses a history cursor or count that is not one, naming the field', async () => {
    const { client } = cluster;
    // A count of -1 threw a TypeError, 0 read everything; a bad cursor was a Redis ReplyError.
    for (const [options, path] of [
      [{ count: -1 }, 'count'],
      [{ count: 0 }, 'count'],
      [{ after: 'zz' }, 'after'],
    ] as const) {
      await expect(
        client.history(sessionId, options),
        JSON.stringify(options),
      ).rejects.toMatchObject(refusal('history options', path));
    }
    expect(await client.history(sessionId, { count: 1 })).toHaveLength(1);
  });

  it('refuses a watch cursor that is not a stream id, naming it', async () => {
    const watching = async () => {
      for await (const _ of cluster.client.watch(sessionId, { after: 'zz' })) break;
    };
    await expect(watching()).rejects.toMatchObject(refusal('watch options', 'after'));
  });

  it('refuses an empty cancel reason or one over 2000 characters, as the HTTP API does', async () => {
    for (const reason of ['', 'x'.repeat(2_001)]) {
      await expect(cluster.client.cancel(sessionId, reason)).rejects.toMatchObject(
        refusal('cancel request', 'reason'),
      );
    }
    expect((await cluster.client.get(sessionId)).session.state).toBe('PLANNING');
  });

  it('refuses wait options that are not a positive timeout or a known end, naming the field', async () => {
    // -5 gave up at once, NaN (or 0) waited for ever; an unknown key was ignored.
    for (const [options, path] of [
      [{ timeoutMs: -5 }, 'timeoutMs'],
      [{ timeoutMs: 0 }, 'timeoutMs'],
      [{ timeoutMs: Number.NaN }, 'timeoutMs'],
      [{ timeoutMs: Number.POSITIVE_INFINITY }, 'timeoutMs'],
      [{ until: 'done' }, 'until'],
      [{ timeout: 5 }, 'timeout'],
    ] as const) {
      await expect(
        cluster.client.wait(sessionId, options as never),
        String(Object.entries(options)),
      ).rejects.toMatchObject(refusal('wait options', path));
    }
  });
});

describe('the words of a refused option', () => {
  it('say what the field expects and what it got, not zod\'s "received NaN"', async () => {
    await expect(cluster.client.wait(sessionId, { timeoutMs: Number.NaN })).rejects.toThrow(
      'Invalid wait options: timeoutMs: expected a number, got NaN',
    );
    await expect(cluster.client.list({ limit: 0 })).rejects.toThrow(
      'Invalid list options: limit: at least 1, got 0',
    );
  });
});

describe('a wait that runs out of time', () => {
  it('throws TIMEOUT, not INVALID_STATE, saying the state and that no roles run', async () => {
    const error = await cluster.client.wait(sessionId, { timeoutMs: 1 }).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'TIMEOUT',
      message: expect.stringContaining(`timed out after 1 ms: it is still PLANNING`) as string,
      hint: expect.stringContaining('No roles run on this Redis under prefix') as string,
      details: { sessionId, state: 'PLANNING', timeoutMs: 1 },
    });
  });
});

describe('a wait whose time runs out as the session settles', () => {
  it('returns the session that reached what the wait waited for, rather than TIMEOUT', async () => {
    const { client } = cluster;
    const { id } = await client.submit({ instruction: 'stops for a person' });
    await moveSession(client, id, 'BLOCKED');
    // 1 ms runs out before the watch reads the state: the session is settled (what a wait waits
    // for by default) all the same.
    const view = await client.wait(id, { timeoutMs: 1 });
    expect(view.session.state).toBe('BLOCKED');
    // BLOCKED is not what a wait until finished waits for.
    await expect(client.wait(id, { timeoutMs: 1, until: 'finished' })).rejects.toMatchObject({
      code: 'TIMEOUT',
      details: { sessionId: id, state: 'BLOCKED' },
    });
  });
});

describe('resumePending', () => {
  it('says NOT_FOUND of a session that does not exist, as the other calls about one session do', async () => {
    await expect(cluster.client.resumePending('no-such-session')).rejects.toMatchObject({
      code: 'NOT_FOUND',
    });
    expect(await cluster.client.resumePending(sessionId)).toBe(false);
  });
});
