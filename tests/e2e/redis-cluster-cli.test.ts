import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { orq, root } from '../support/cli.js';
import { startLocalRedisCluster, type LocalRedisCluster } from '../support/redis-cluster.js';

let redisCluster: LocalRedisCluster;

beforeAll(async () => {
  redisCluster = await startLocalRedisCluster(3);
}, 60_000);

afterAll(async () => {
  await redisCluster?.stop();
});

describe('the CLI on a Redis Cluster', () => {
  it('orq run and orq status work with REDIS_URL naming one node and ORQ__redis__cluster', async () => {
    const env = {
      REDIS_URL: redisCluster.urls[2]!,
      ORQ__redis__cluster: 'true',
      ORQ_PREFIX: `cli${randomUUID().slice(0, 8)}`,
    };
    const scenario = resolve(root, 'examples/scenarios/diamond.yaml');
    const run = await orq(['run', '--scenario', scenario, '--json', 'build it'], { env });
    expect(run.stderr).not.toContain('MOVED');
    expect(run.code, run.stderr).toBe(0);
    const view = JSON.parse(run.stdout) as { session: { id: string; state: string } };
    expect(view.session.state).toBe('COMPLETED');

    const status = await orq(['status', view.session.id, '--json'], { env });
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ session: { state: 'COMPLETED' } });
  });

  it('fails fast, naming the setting, when REDIS_URL is a cluster node and cluster is not set', async () => {
    const run = await orq(['status'], { env: { REDIS_URL: redisCluster.urls[0]! } });
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain('is a node of a Redis Cluster');
    expect(run.stderr).toContain('ORQ__redis__cluster=true');
  });

  it('refuses redis.cluster without a URL, naming what to set', async () => {
    const run = await orq(['status'], { env: { ORQ__redis__cluster: 'true' } });
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain('redis.cluster is set, but redis.url is not');
    expect(run.stderr).toContain('Set REDIS_URL');
  });
});
