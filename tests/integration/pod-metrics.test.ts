import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { silentLogger } from '../../src/shared/logger.js';
import { startPrivateRedis } from '../../src/shared/redis-server.js';
import { createRoleMetrics } from '../../src/workers/metrics.js';
import { PodHealth } from '../../src/workers/pod-health.js';
import { startPodServer, type PodServer } from '../../src/workers/pod-server.js';
import { startRoles, type RunningRoles } from '../../src/workers/registry.js';
import { ALL_ROLES } from '../support/cluster.js';
import { eventually } from '../support/scenarios.js';

let pod: RunningRoles | undefined;
let client: OrqClient | undefined;
let server: PodServer | undefined;
afterEach(async () => {
  await server?.close();
  await client?.close();
  await pod?.close(5_000);
  pod = undefined;
  client = undefined;
  server = undefined;
});

/** GET a path of the pod's listener: the status and, for the probes, the parsed body. */
async function probe(path: '/healthz' | '/readyz') {
  const res = await fetch(`${server!.url}${path}`);
  return { status: res.status, body: PodHealth.parse(await res.json()) };
}

describe('pod metrics (orq start --metrics-port)', () => {
  it('counts every job of a session with its duration, per role', async () => {
    const url = inject('redisUrl');
    const config = parseConfig({ redis: { prefix: `m${randomUUID().slice(0, 8)}` } });
    const metrics = createRoleMetrics();
    server = await startPodServer({ host: '127.0.0.1', port: 0, metrics });
    pod = await startRoles({
      roles: ALL_ROLES,
      connection: url,
      config,
      logger: silentLogger,
      metrics,
    });
    client = await createClient({ connection: url, config });

    const session = await client.submit({ instruction: 'write the parser and the tests' });
    const view = await client.wait(session.id, { timeoutMs: 20_000 });
    expect(view.session.state).toBe('COMPLETED');

    const res = await fetch(`${server.url}/metrics`);
    expect(res.status).toBe(200);
    const text = await res.text();
    const count = (role: string) =>
      Number(
        new RegExp(
          `^orq_job_duration_seconds_count\\{role="${role}",outcome="completed"\\} (\\d+)$`,
          'm',
        ).exec(text)?.[1] ?? 0,
      );
    expect(count('planner')).toBeGreaterThanOrEqual(1);
    expect(count('worker')).toBe(view.tasks.length);
    // The judge judged the plan and every task.
    expect(count('judge')).toBeGreaterThanOrEqual(view.tasks.length + 1);
    expect(count('coordinator')).toBeGreaterThanOrEqual(view.tasks.length + 1);
    const decisions = (kind: string) =>
      Number(
        new RegExp(`^orq_decisions_total\\{decision="${kind}"\\} (\\d+)$`, 'm').exec(text)?.[1] ??
          0,
      );
    expect(decisions('refinement:accept')).toBe(1);
    expect(decisions('task:done')).toBe(view.tasks.length);
    expect((await fetch(`${server.url}/other`)).status).toBe(404);
  });
});

describe('pod probes (orq start --metrics-port: /healthz, /readyz)', () => {
  it('readiness follows the pod: starting, ready, Redis down and back, stopping', async () => {
    // A Redis of this test's own, to stop and start again under the running pod.
    const dir = mkdtempSync(join(tmpdir(), 'orq-pod-probes-'));
    let redis = await startPrivateRedis({ dir, appendonly: false });
    try {
      server = await startPodServer({ host: '127.0.0.1', port: 0, metrics: createRoleMetrics() });
      expect(await probe('/readyz')).toEqual({ status: 503, body: { status: 'starting' } });
      expect(await probe('/healthz')).toEqual({ status: 200, body: { status: 'ok' } });

      const config = parseConfig({ redis: { prefix: `p${randomUUID().slice(0, 8)}` } });
      const running = await startRoles({
        roles: ['worker', 'judge'],
        connection: redis.url,
        config,
        logger: silentLogger,
      });
      pod = running;
      server.setHealth(() => running.health());
      const roles = { worker: 'running', judge: 'running' };
      expect(await probe('/readyz')).toEqual({
        status: 200,
        body: { status: 'ok', redis: 'up', roles },
      });

      const port = Number(new URL(redis.url).port);
      await redis.stop();
      expect(await probe('/readyz')).toEqual({
        status: 503,
        body: { status: 'unavailable', redis: 'unreachable', roles },
      });
      // Liveness does not follow Redis: restarting the pod would not bring Redis back.
      expect((await probe('/healthz')).status).toBe(200);

      redis = await startPrivateRedis({ dir, port, appendonly: false });
      await eventually(
        async () => ((await probe('/readyz')).status === 200 ? true : undefined),
        'the pod to be ready again',
        20_000,
      );

      const closing = running.close(5_000);
      expect(await probe('/readyz')).toMatchObject({ status: 503, body: { status: 'stopping' } });
      await closing;
      pod = undefined;
    } finally {
      await redis.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
