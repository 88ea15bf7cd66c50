import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { silentLogger } from '../../src/shared/logger.js';
import {
  createRoleMetrics,
  startMetricsServer,
  type MetricsServer,
} from '../../src/workers/metrics.js';
import { startRoles, type RunningRoles } from '../../src/workers/registry.js';
import { ALL_ROLES } from '../support/cluster.js';

let pod: RunningRoles | undefined;
let client: OrqClient | undefined;
let server: MetricsServer | undefined;
afterEach(async () => {
  await server?.close();
  await client?.close();
  await pod?.close(5_000);
});

describe('pod metrics (orq start --metrics-port)', () => {
  it('counts every job of a session with its duration, per role', async () => {
    const url = inject('redisUrl');
    const config = parseConfig({ redis: { prefix: `m${randomUUID().slice(0, 8)}` } });
    const metrics = createRoleMetrics();
    server = await startMetricsServer(metrics, { host: '127.0.0.1', port: 0 });
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

    const res = await fetch(server.url);
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
    expect((await fetch(server.url.replace('/metrics', '/other'))).status).toBe(404);
  });
});
