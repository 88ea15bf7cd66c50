import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchContext, BenchScenario } from '../lib/context.js';
import { benchClient, benchConfig, pollSessionEnd, waitForSessionEnd } from '../lib/orq.js';
import { spawnOrqStart, stopPods, type OrqPod } from '../lib/processes.js';
import { log } from '../lib/report.js';
import { median } from '../lib/stats.js';
import type { OrqClient } from '../../src/producers/client.js';
import { sessionKeys } from '../../src/shared/store/keys.js';
import {
  startFakeLlmServer,
  type FakeLlmRequest,
  type FakeReply,
} from '../../tests/support/fake-llm-server.js';

/**
 * fair.quota_small_behind_big_ratio (issue 46): fairness where the provider's quota is the
 * bottleneck. Every role calls one OpenAI-compatible server with one key and one rateLimit; the
 * server enforces QUOTA and answers 429 with Retry-After beyond it. Pods are processes: one runs
 * planner, judge, replanner and coordinator, WORKER_PODS run workers, SLOTS jobs each. A 4-task
 * session's time (submit to COMPLETED) behind a BIG_TASKS-task session whose calls saturate the
 * quota, over its time alone with the same pods. Before the fair line its calls queued behind the
 * backlog's retries: 54-67x at 120 requests per minute (issue 46).
 */
const WORKER_PODS = 3;
const SLOTS = 8;
const BIG_TASKS = 100;
const SMALL_TASKS = 4;
const ROUNDS = 3;
/** What the model takes to answer. */
const MODEL_MS = 100;
/**
 * The server's quota: 20 requests a second, refilled continuously, 2 s of it at once. The big
 * session's 200 calls then take 10 s, and a small bucket keeps its first burst short, so the
 * quota binds from the first second. (At 120 a minute, the issue's setting, no schedule can
 * reach the goal: the small session's 10 calls alone take 5 s of the quota, see docs/quotas.md.)
 */
const QUOTA = { requests: 40, perMs: 2_000 };
/** orq's bucket: the server's rate, 90 % of its burst (the margin quota.ts explains). */
const RATE_LIMIT = {
  requestsPerMinute: (QUOTA.requests * 60_000) / QUOTA.perMs,
  burstSeconds: (0.9 * QUOTA.perMs) / 1000,
};
/** How long after the big session starts running the small one is submitted. */
const BACKLOG_MS = 2_000;
// Not ORQ_*: the pods' environment leaves those out (benchEnv).
const KEY_ENV = 'BENCH_FAIR_QUOTA_KEY';

/** A plan of `n` independent tasks whose titles carry the instruction's words. */
function plan(n: number, name: string) {
  return {
    tasks: Array.from({ length: n }, (_, i) => ({
      id: `t${i + 1}`,
      title: `${name} part ${i + 1}`,
      acceptance: `${name} part ${i + 1} is done`,
      dependencies: [],
    })),
  };
}

/** Every role's answer: the plan its instruction names, accepted at once, each task done. */
async function answer(request: FakeLlmRequest): Promise<FakeReply> {
  await sleep(MODEL_MS);
  switch (request.schemaName) {
    case 'PlanBreakdown':
      return {
        json: request.text.includes('big backlog')
          ? plan(BIG_TASKS, 'big backlog')
          : plan(SMALL_TASKS, 'small session'),
      };
    case 'QualityJudgement':
      return { json: { score: 95, isAcceptable: true, issues: [], suggestions: [] } };
    case 'TaskOutput':
      return { json: { output: 'done', log: '' } };
    case 'TaskJudgement':
      return {
        json: { success: true, shouldContinue: false, shouldReplan: false, reason: 'done' },
      };
    default:
      return { status: 400 };
  }
}

async function run(ctx: BenchContext): Promise<void> {
  const { url, admin } = ctx.redis;
  const config = benchConfig('fq');
  const prefix = config.redis.prefix;
  process.env[KEY_ENV] = 'sk-bench-fair-quota';
  const server = await startFakeLlmServer('openai', answer, { quota: QUOTA });
  const llm = {
    default: {
      provider: 'openai' as const,
      model: 'bench',
      baseUrl: server.baseUrl,
      apiKeyEnv: KEY_ENV,
      rateLimit: RATE_LIMIT,
    },
  };
  const pods: OrqPod[] = [
    spawnOrqStart(
      ['--roles', 'planner,judge,replanner,coordinator', '--concurrency', String(SLOTS)],
      url,
      prefix,
    ),
  ];
  for (let i = 0; i < WORKER_PODS; i += 1) {
    pods.push(spawnOrqStart(['--roles', 'worker', '--concurrency', String(SLOTS)], url, prefix));
  }
  for (const pod of pods) ctx.pods.add(pod);
  const client = await benchClient(url, config);
  /** The bucket refilled: a session alone starts with the whole burst, as in production. */
  const refill = () => sleep(QUOTA.perMs + 500);
  const small = async () => {
    const submittedAt = Date.now();
    const { id } = await client.submit({ instruction: 'small session', config: { llm } });
    const session = await waitForSessionEnd(admin, prefix, id, 600_000);
    return { submittedAt, completedAt: Date.parse(session.updatedAt) };
  };
  try {
    await Promise.all(pods.map((p) => p.ready));
    // Warm-up, discarded.
    await small();
    const alone: number[] = [];
    for (let i = 0; i < ROUNDS; i += 1) {
      await refill();
      const r = await small();
      alone.push(r.completedAt - r.submittedAt);
    }
    const behind: number[] = [];
    const used: number[] = [];
    for (let i = 0; i < ROUNDS; i += 1) {
      await refill();
      const { id } = await client.submit({ instruction: 'big backlog', config: { llm } });
      const meta = sessionKeys(prefix, id).meta;
      while ((await admin.hget(meta, 'state')) !== 'RUNNING') await sleep(20);
      const from = Date.now();
      await sleep(BACKLOG_MS);
      const r = await small();
      behind.push(r.completedAt - r.submittedAt);
      if ((await admin.hget(meta, 'state')) === 'RUNNING') {
        await client.cancel(id);
        await pollSessionEnd(admin, meta, id);
      } else {
        log('fair-quota: the big session ended before the small one: the backlog was too short');
      }
      // From the big session's plan accepted (two calls after a full bucket) to the small one's
      // end the backlog kept the quota busy: what the server let through over what it allowed
      // (its bucket, taken as full, and the refill).
      const to = r.completedAt;
      const within = server.quotaLog.accepted.filter((t) => t >= from && t <= to).length;
      used.push(within / (QUOTA.requests + ((to - from) * QUOTA.requests) / QUOTA.perMs));
    }
    const { accepted, refused } = server.quotaLog;
    const share = refused.length / (accepted.length + refused.length);
    const ratio = median(behind) / median(alone);
    log(
      `fair-quota: 4 tasks alone ${median(alone).toFixed(0)} ms, behind ${BIG_TASKS} tasks ${median(behind).toFixed(0)} ms (${ratio.toFixed(2)}x); ${(share * 100).toFixed(2)} % 429, ${(median(used) * 100).toFixed(1)} % of the quota used`,
    );
    const context = {
      worker_pods: WORKER_PODS,
      slots_per_pod: SLOTS,
      big_session_tasks: BIG_TASKS,
      model_ms: MODEL_MS,
      server_quota: `${QUOTA.requests} requests per ${QUOTA.perMs / 1000} s (token bucket)`,
      rate_limit: `requestsPerMinute ${RATE_LIMIT.requestsPerMinute}, burstSeconds ${RATE_LIMIT.burstSeconds}`,
    };
    ctx.reporter.record({
      name: 'fair.quota_small_behind_big_ratio',
      value: ratio,
      unit: 'ratio',
      goal: '<= 1.3',
      alone_ms: median(alone),
      behind_ms: median(behind),
      rounds_alone_ms: alone,
      rounds_behind_ms: behind,
      ...context,
    });
    ctx.reporter.record({
      name: 'fair.quota_http_429_share',
      value: share,
      unit: 'ratio',
      goal: '<= 0.01',
      requests: accepted.length + refused.length,
      answered_429: refused.length,
      ...context,
    });
    ctx.reporter.record({
      name: 'fair.quota_utilization',
      value: median(used),
      unit: 'ratio',
      goal: '>= 0.9',
      rounds: used,
      note: "requests the server let through from the big session's plan accepted to the small session's end, over what its quota allowed then (a full bucket and its refill)",
      ...context,
    });
  } finally {
    await closeAll(client, pods, ctx);
    await server.close();
    await ctx.flush();
  }
}

async function closeAll(client: OrqClient, pods: OrqPod[], ctx: BenchContext): Promise<void> {
  await client.close();
  await stopPods(pods, ctx.pods);
}

export const fairQuota: BenchScenario = {
  name: 'fair-quota',
  description:
    'a 4-task session behind a 100-task one when the provider quota binds (every role on one key), over alone',
  run,
};
