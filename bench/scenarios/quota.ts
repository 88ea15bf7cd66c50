import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchContext, BenchScenario } from '../lib/context.js';
import type { OrqClient } from '../../src/producers/client.js';
import {
  benchClient,
  benchConfig,
  startInProcessRoles,
  waitForSessionEnd,
  writePlanScenario,
} from '../lib/orq.js';
import { independentTasks } from '../lib/plans.js';
import { spawnOrqStart, stopPods, type OrqPod } from '../lib/processes.js';
import { log } from '../lib/report.js';
import { startFakeLlmServer } from '../../tests/support/fake-llm-server.js';

const PODS = 4;
const CONCURRENCY = 4;
/** The server's quota: 60 requests per 10 s, refilled continuously (as OpenAI's). */
const QUOTA = { requests: 60, perMs: 10_000 };
/** What the model takes to answer. */
const MODEL_MS = 50;
/**
 * The bucket orq keeps: the server's rate, a burst of 9 s rather than its 10: a request granted
 * in Redis reaches the server some milliseconds later, more or fewer on a busy machine, and
 * the second's slack absorbs that jitter.
 */
const BURST_SECONDS = 9;
// Not ORQ_*: the pods' environment leaves those out (benchEnv).
const KEY_ENV = 'BENCH_QUOTA_KEY';

const RATE_LIMIT = {
  requestsPerMinute: (QUOTA.requests * 60_000) / QUOTA.perMs,
  burstSeconds: BURST_SECONDS,
};

/** One session of `tasks` independent tasks through a fresh server; what the server saw. */
async function measure(
  ctx: BenchContext,
  client: OrqClient,
  prefix: string,
  tasks: number,
  rateLimit: typeof RATE_LIMIT | undefined,
) {
  const server = await startFakeLlmServer(
    'openai',
    async () => {
      await sleep(MODEL_MS);
      return { json: { output: 'done', log: '' } };
    },
    { quota: QUOTA },
  );
  try {
    const name = rateLimit ? 'quota' : 'quota-unlimited';
    const scenario = writePlanScenario(ctx.tmpDir, name, independentTasks(tasks));
    const submitted = await client.submit({
      instruction: `${name} benchmark`,
      config: {
        llm: {
          scenario,
          worker: {
            provider: 'openai',
            model: 'bench',
            baseUrl: server.baseUrl,
            apiKeyEnv: KEY_ENV,
            ...(rateLimit ? { rateLimit } : {}),
          },
        },
      },
    });
    // Without a limit, tasks whose retries all met 429 may block the session: it is measured
    // all the same.
    const state = await waitForSessionEnd(ctx.redis.admin, prefix, submitted.id, 600_000).then(
      (session) => session.state as string,
      (error: unknown) => String(error),
    );
    const { accepted, refused } = server.quotaLog;
    const all = [...accepted, ...refused];
    const first = Math.min(...all);
    const last = Math.max(...accepted);
    const allowed = QUOTA.requests + ((last - first) * QUOTA.requests) / QUOTA.perMs;
    if (process.env.BENCH_QUOTA_DEBUG)
      log(`refused at ${refused.map((t) => t - first).join(', ')}`);
    return {
      share: refused.length / all.length,
      utilization: accepted.length / allowed,
      context: {
        pods: PODS,
        concurrency_per_pod: CONCURRENCY,
        tasks,
        session_state: state,
        server_quota: `${QUOTA.requests} requests per ${QUOTA.perMs / 1000} s (token bucket)`,
        rate_limit: rateLimit
          ? `requestsPerMinute ${rateLimit.requestsPerMinute}, burstSeconds ${rateLimit.burstSeconds}`
          : 'none (the SDK retries 429s itself)',
        requests: all.length,
        answered_429: refused.length,
        span_s: (last - first) / 1000,
      },
    };
  } finally {
    await server.close();
  }
}

/**
 * Provider quotas (issue 33): 4 `orq start --roles worker` pods, concurrency 4 each, execute
 * the tasks of one session through an OpenAI-compatible server that enforces 60 requests per
 * 10 s and answers 429 with Retry-After beyond it; once with the worker's rateLimit, and once
 * without (the SDK retrying on its own) for comparison. Measured at the server: the share of
 * requests answered 429, and the requests it let through from the first request to the last
 * over what its quota allowed in that span (a full bucket and its refill): work waits the
 * whole span, so 1 is all of the quota used.
 */
async function run(ctx: BenchContext): Promise<void> {
  const tasks = ctx.quick ? 120 : 240;
  const { url } = ctx.redis;
  const config = benchConfig('quota');
  const prefix = config.redis.prefix;
  process.env[KEY_ENV] = 'sk-bench-quota';
  const roles = await startInProcessRoles(url, config, ['planner', 'judge', 'coordinator'], {
    concurrency: 16,
  });
  const client = await benchClient(url, config);
  const pods: OrqPod[] = [];
  try {
    for (let i = 0; i < PODS; i += 1) {
      const pod = spawnOrqStart(
        ['--roles', 'worker', '--concurrency', String(CONCURRENCY)],
        url,
        prefix,
      );
      pods.push(pod);
      ctx.pods.add(pod);
    }
    await Promise.all(pods.map((p) => p.ready));
    const limited = await measure(ctx, client, prefix, tasks, RATE_LIMIT);
    const unlimited = await measure(ctx, client, prefix, tasks, undefined);
    const percent = (ratio: number) => `${(ratio * 100).toFixed(2)} %`;
    log(
      `quota: ${percent(limited.share)} of ${limited.context.requests} requests answered 429 (${percent(unlimited.share)} without a rateLimit), ${percent(limited.utilization)} of the quota used over ${limited.context.span_s.toFixed(1)} s (${percent(unlimited.utilization)} without)`,
    );
    const record = (name: string, value: number, context: object) =>
      ctx.reporter.record({ name, value, unit: 'ratio', ...context });
    record('quota.http_429_share', limited.share, limited.context);
    record('quota.utilization', limited.utilization, limited.context);
    record('quota.unlimited.http_429_share', unlimited.share, unlimited.context);
    record('quota.unlimited.utilization', unlimited.utilization, unlimited.context);
  } finally {
    await client.close();
    await stopPods(pods, ctx.pods);
    await roles.close(5_000);
    await ctx.flush();
  }
}

export const quota: BenchScenario = {
  name: 'quota',
  description:
    '4 worker pods against a server enforcing 60 requests per 10 s: 429 share, quota used',
  run,
};
