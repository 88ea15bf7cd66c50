import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { formatUsage } from '../../src/producers/cli/format.js';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { scanSessions } from '../../src/producers/http/metrics.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { silentLogger } from '../../src/shared/logger.js';
import { startTestRedis } from '../support/test-redis.js';
import { createRoleMetrics } from '../../src/workers/metrics.js';
import { PodHealth } from '../../src/workers/pod-health.js';
import { startPodServer, type PodServer } from '../../src/workers/pod-server.js';
import { startRoles, type RunningRoles } from '../../src/workers/registry.js';
import { answerOneTask } from '../support/fake-answers.js';
import { ALL_ROLES } from '../support/cluster.js';
import { FAKE_USAGE, startFakeLlmServer, type FakeLlmServer } from '../support/fake-llm-server.js';
import { eventually } from '../support/scenarios.js';

let pod: RunningRoles | undefined;
let client: OrqClient | undefined;
let server: PodServer | undefined;
let llm: FakeLlmServer | undefined;
afterEach(async () => {
  await server?.close();
  await llm?.close();
  llm = undefined;
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

/** The value of one sample of the Prometheus text, its labels in any order; 0 when absent. */
function sample(text: string, name: string, labels: Record<string, string>): number {
  for (const line of text.split('\n')) {
    const match = /^(\w+)\{([^}]*)\} (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const seen = Object.fromEntries(
      [...(match[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]),
    );
    if (Object.entries(labels).every(([k, v]) => seen[k] === v)) return Number(match[3]);
  }
  return 0;
}

describe.each(['openai', 'anthropic'] as const)(
  'pod metrics of LLM HTTP requests (%s protocol)',
  (protocol) => {
    it('counts every HTTP attempt of the model calls: retries, errors by status, latency, per provider, model and role', async () => {
      // The planner's call is answered 500 twice and the worker's 429 once: the SDK retries
      // both inside one call each, and the session completes.
      const sent = new Map<string, number>();
      llm = await startFakeLlmServer(protocol, (request) => {
        const n = (sent.get(request.schemaName) ?? 0) + 1;
        sent.set(request.schemaName, n);
        if (request.schemaName === 'PlanBreakdown' && n <= 2)
          return { status: 500, retryAfterMs: 5 };
        if (request.schemaName === 'TaskOutput' && n === 1) return { status: 429, retryAfterMs: 5 };
        return answerOneTask(request);
      });
      process.env.ORQ_METRICS_TEST_KEY = 'sk-test';
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
      const session = await client.submit({
        instruction: 'write the parser',
        config: {
          llm: {
            default: {
              provider: protocol,
              baseUrl: llm.baseUrl,
              model: 'm-test',
              apiKeyEnv: 'ORQ_METRICS_TEST_KEY',
              timeoutSeconds: 20,
            },
          },
        },
      });
      const view = await client.wait(session.id, { timeoutMs: 20_000 });
      expect(view.session.state).toBe('COMPLETED');
      expect(llm.statuses.filter((s) => s !== 200)).toEqual([500, 500, 429]);

      const text = await (await fetch(`${server.url}/metrics`)).text();
      const of = (role: string, extra: Record<string, string> = {}) => ({
        provider: protocol,
        model: 'm-test',
        role,
        ...extra,
      });
      const requests = (role: string, status: string) =>
        sample(text, 'orq_llm_http_requests_total', of(role, { status }));
      expect(requests('planner', '500')).toBe(2);
      expect(requests('planner', '200')).toBe(1);
      expect(requests('worker', '429')).toBe(1);
      expect(requests('worker', '200')).toBe(1);
      // The plan judge and the task judge: one request each, no error.
      expect(requests('judge', '200')).toBe(2);
      expect(sample(text, 'orq_llm_http_retries_total', of('planner'))).toBe(2);
      expect(sample(text, 'orq_llm_http_retries_total', of('worker'))).toBe(1);
      expect(sample(text, 'orq_llm_http_retries_total', of('judge'))).toBe(0);
      expect(sample(text, 'orq_llm_http_errors_total', of('planner', { status: '500' }))).toBe(2);
      expect(sample(text, 'orq_llm_http_errors_total', of('worker', { status: '429' }))).toBe(1);
      expect(sample(text, 'orq_llm_http_errors_total', of('judge', { status: '200' }))).toBe(0);
      const latency = (role: string) =>
        sample(text, 'orq_llm_http_request_duration_seconds_count', of(role));
      expect([latency('planner'), latency('worker'), latency('judge')]).toEqual([3, 2, 2]);
      expect(
        sample(text, 'orq_llm_http_request_duration_seconds_bucket', of('planner', { le: '+Inf' })),
      ).toBe(3);

      // The GenAI conventions' client metrics: one observation per logical call, its tokens
      // by type, and its duration (retries included), per provider, model and role.
      const genAi = (role: string, extra: Record<string, string> = {}) => ({
        gen_ai_operation_name: 'chat',
        gen_ai_provider_name: protocol,
        gen_ai_request_model: 'm-test',
        orq_role: role,
        ...extra,
      });
      const tokens = (role: string, type: string, stat: 'sum' | 'count') =>
        sample(text, `gen_ai_client_token_usage_${stat}`, genAi(role, { gen_ai_token_type: type }));
      expect(tokens('planner', 'input', 'count')).toBe(1);
      expect(tokens('planner', 'input', 'sum')).toBe(FAKE_USAGE.input);
      expect(tokens('planner', 'output', 'sum')).toBe(FAKE_USAGE.output);
      expect(tokens('judge', 'input', 'sum')).toBe(2 * FAKE_USAGE.input);
      expect(tokens('worker', 'output', 'count')).toBe(1);
      const calls = (role: string) =>
        sample(
          text,
          'gen_ai_client_operation_duration_seconds_count',
          genAi(role, { error_type: '' }),
        );
      expect([calls('planner'), calls('judge'), calls('worker')]).toEqual([1, 2, 1]);

      // The session's usage: four logical calls, and the seven HTTP requests they took.
      expect(view.usage.total.calls).toBe(4);
      expect(view.usage.httpRequests).toEqual({
        total: 7,
        failed: 3,
        byRole: { planner: 3, judge: 2, worker: 2 },
      });
      const [line, header, ...rows] = formatUsage(view);
      expect(line).toContain('in 4 logical call(s) (7 HTTP request(s), 3 failed)');
      expect(header?.split(/\s+/).filter(Boolean)).toEqual([
        'ROLE',
        'IN',
        'OUT',
        'CALLS',
        'HTTP',
        'USD',
      ]);
      const planner = rows.find((row) => row.trim().startsWith('planner'));
      expect(planner?.trim().split(/\s+/).slice(3, 5)).toEqual(['1', '3']);

      // The API's /metrics reads the same counts from Redis, per role.
      const redis = new Redis(url);
      try {
        const totals = await scanSessions(redis, config.redis.prefix);
        expect(totals.calls.find((c) => c.role === 'planner')).toEqual({
          role: 'planner',
          calls: 1,
          httpRequests: 3,
        });
        expect(totals.httpFailed).toBe(3);
      } finally {
        redis.disconnect();
      }
    });
  },
);

describe('pod probes (orq start --metrics-port: /healthz, /readyz)', () => {
  it('readiness follows the pod: starting, ready, Redis down and back, stopping', async () => {
    // A Redis of this test's own, to stop and start again under the running pod.
    const dir = mkdtempSync(join(tmpdir(), 'orq-pod-probes-'));
    const redis = await startTestRedis({ dir, appendonly: false });
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

      await redis.stop();
      expect(await probe('/readyz')).toEqual({
        status: 503,
        body: { status: 'unavailable', redis: 'unreachable', roles },
      });
      // Liveness does not follow Redis: restarting the pod would not bring Redis back.
      expect((await probe('/healthz')).status).toBe(200);

      await redis.start();
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
