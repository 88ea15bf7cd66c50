import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchContext, BenchScenario } from '../lib/context.js';
import { benchClient, benchConfig, pollSessionEnd, waitForSessionEnd } from '../lib/orq.js';
import { spawnOrqStart, stopPods, type OrqPod } from '../lib/processes.js';
import { JobStages } from '../lib/job-stages.js';
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
/**
 * BENCH_FAIR_QUOTA_ISSUE=1: the issue's setting instead, 120 requests a minute (a 10 s bucket),
 * 3 rounds: a figure to quote, not one of the run's measurements to compare (its name says so).
 */
const ISSUE_SETTING = process.env.BENCH_FAIR_QUOTA_ISSUE === '1';
const ROUNDS = ISSUE_SETTING ? 3 : 5;
/** What the model takes to answer. */
const MODEL_MS = 100;
/**
 * The server's quota: 20 requests a second, refilled continuously, 2 s of it at once. The big
 * session's 200 calls then take 10 s, and a small bucket keeps its first burst short, so the
 * quota binds from the first second. (At 120 a minute, the issue's setting, no schedule can
 * reach the goal: the small session's 10 calls alone take 5 s of the quota, see docs/quotas.md.)
 */
const QUOTA = ISSUE_SETTING ? { requests: 20, perMs: 10_000 } : { requests: 40, perMs: 2_000 };
/** orq's bucket: the server's rate, 90 % of its burst (the margin quota.ts explains). */
const RATE_LIMIT = {
  requestsPerMinute: (QUOTA.requests * 60_000) / QUOTA.perMs,
  burstSeconds: (0.9 * QUOTA.perMs) / 1000,
};
/** How long after the big session starts running the small one is submitted. */
const BACKLOG_MS = 2_000;
/** The span over which the quota used is measured, from the big session's start. */
const USED_WINDOW_MS = 6_000;
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

/** The plan an instruction asks for: `<name>` or `<name> with <n> tasks`. */
function planFor(text: string) {
  if (text.includes('big backlog')) return plan(BIG_TASKS, 'big backlog');
  const asked = /(tenant\w+ session \d+) with (\d+) tasks/.exec(text);
  if (asked) return plan(Number(asked[2]), asked[1] as string);
  return plan(SMALL_TASKS, 'small session');
}

/** Every role's answer: the plan its instruction names, accepted at once, each task done. */
async function answer(request: FakeLlmRequest): Promise<FakeReply> {
  await sleep(MODEL_MS);
  switch (request.schemaName) {
    case 'PlanBreakdown':
      return { json: planFor(request.text) };
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

/** Every role on the fake server's quota, one key, one rateLimit. */
function sessionLlm(baseUrl: string) {
  return {
    default: {
      provider: 'openai' as const,
      model: 'bench',
      baseUrl,
      apiKeyEnv: KEY_ENV,
      rateLimit: RATE_LIMIT,
    },
  };
}

/** One pod of planner, judge, replanner and coordinator, WORKER_PODS of workers: processes. */
function startPods(ctx: BenchContext, prefix: string, extra: string[] = []): OrqPod[] {
  const slots = ['--concurrency', String(SLOTS), ...extra];
  const pods = [
    spawnOrqStart(
      ['--roles', 'planner,judge,replanner,coordinator', ...slots],
      ctx.redis.url,
      prefix,
    ),
  ];
  for (let i = 0; i < WORKER_PODS; i += 1) {
    pods.push(spawnOrqStart(['--roles', 'worker', ...slots], ctx.redis.url, prefix));
  }
  for (const pod of pods) ctx.pods.add(pod);
  return pods;
}

async function run(ctx: BenchContext): Promise<void> {
  const { url, admin } = ctx.redis;
  const config = benchConfig('fq');
  const prefix = config.redis.prefix;
  process.env[KEY_ENV] = 'sk-bench-fair-quota';
  /** With BENCH_FAIR_QUOTA_DEBUG: when the server answered each of the small session's calls. */
  const smallCalls: { at: number; schema: string }[] = [];
  const server = await startFakeLlmServer(
    'openai',
    (request) => {
      if (request.text.includes('small session')) {
        smallCalls.push({ at: Date.now(), schema: request.schemaName });
      }
      return answer(request);
    },
    { quota: QUOTA },
  );
  const llm = sessionLlm(server.baseUrl);
  const pods = startPods(ctx, prefix);
  const client = await benchClient(url, config);
  const stages = process.env.BENCH_FAIR_QUOTA_DEBUG ? new JobStages(admin, prefix) : undefined;
  stages?.start();
  /** The bucket refilled: a session alone starts with the whole burst, as in production. */
  const refill = () => sleep(QUOTA.perMs + 500);
  const small = async () => {
    const submittedAt = Date.now();
    smallCalls.length = 0;
    const { id } = await client.submit({ instruction: 'small session', config: { llm } });
    const session = await waitForSessionEnd(admin, prefix, id, 600_000);
    if (process.env.BENCH_FAIR_QUOTA_DEBUG) {
      const steps = (await client.history(id)).map(({ entry }) => {
        const e = entry as { timestamp: string; type: string; entity?: string; to?: string };
        return `${Date.parse(e.timestamp) - submittedAt}ms ${e.type} ${e.entity ?? ''} ${e.to ?? ''}`;
      });
      log(`small session: ${steps.join('; ')}`);
      const calls = smallCalls.map((c) => `${c.at - submittedAt}ms ${c.schema}`);
      log(`small session's calls answered: ${calls.join('; ')}`);
      await stages?.stop();
      stages?.start();
      log(`small session's jobs:\n${stages?.timeline(id, submittedAt) ?? ''}`);
    }
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
    // A first round warms the pods up under load, as the first small session does alone, and
    // is discarded: in three runs the first round behind took 1.8-2.8 s, the later ones 0.6-1.3 s.
    for (let i = -1; i < ROUNDS; i += 1) {
      await refill();
      const { id } = await client.submit({ instruction: 'big backlog', config: { llm } });
      const meta = sessionKeys(prefix, id).meta;
      while ((await admin.hget(meta, 'state')) !== 'RUNNING') await sleep(20);
      const from = Date.now();
      await sleep(BACKLOG_MS);
      const r = await small();
      if (i >= 0) behind.push(r.completedAt - r.submittedAt);
      // The quota used while the backlog binds, over USED_WINDOW_MS from the big session's plan
      // accepted (two calls after a full bucket): what the server let through over what it
      // allowed (its bucket, taken as full, and the refill). Long enough that the first burst,
      // 90 % of the server's, weighs little.
      await sleep(from + USED_WINDOW_MS - Date.now());
      const within = server.quotaLog.accepted.filter(
        (t) => t >= from && t <= from + USED_WINDOW_MS,
      ).length;
      if (i >= 0) {
        used.push(within / (QUOTA.requests + (USED_WINDOW_MS * QUOTA.requests) / QUOTA.perMs));
      }
      if ((await admin.hget(meta, 'state')) === 'RUNNING') {
        await client.cancel(id);
        await pollSessionEnd(admin, meta, id);
      } else {
        log('fair-quota: the big session ended before the window: the backlog was too short');
      }
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
      name: `fair.quota_small_behind_big_ratio${ISSUE_SETTING ? '_120_rpm' : ''}`,
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
      note: "requests the server let through in the 6 s after the big session's plan was accepted, over what its quota allowed then (a full bucket and its refill)",
      ...context,
    });
  } finally {
    await stages?.stop();
    await closeAll(client, pods, ctx);
    await server.close();
    await ctx.flush();
  }
}

async function closeAll(client: OrqClient, pods: OrqPod[], ctx: BenchContext): Promise<void> {
  await client.close();
  await stopPods(pods, ctx.pods);
}

/** Tenant A's sessions, and their tasks each; tenant B has one session of B_TASKS. */
const A_SESSIONS = 10;
const A_TASKS = 16;
const B_TASKS = 80;

/**
 * fair.quota_tenant_share (issue 46): tenant A with A_SESSIONS sessions and tenant B with one,
 * both with more work than the quota allows, the same pods and quota as above. B's share of the
 * calls the server answered while both had work (from the second both had task calls answered
 * to the second before the first ran out). With `weights`, the pods' tenants.weights.
 */
async function tenantShare(ctx: BenchContext, weights?: Record<string, number>) {
  const { url, admin } = ctx.redis;
  const config = benchConfig(weights ? 'fqw' : 'fqt');
  const prefix = config.redis.prefix;
  const answered: { at: number; tenant: string; task: boolean; execution: boolean }[] = [];
  const server = await startFakeLlmServer(
    'openai',
    async (request) => {
      const reply = await answer(request);
      const tenant = /tenant(A|B)/.exec(request.text)?.[1];
      const execution = request.schemaName === 'TaskOutput';
      const task = execution || request.schemaName === 'TaskJudgement';
      if (tenant) answered.push({ at: Date.now(), tenant, task, execution });
      return reply;
    },
    { quota: QUOTA },
  );
  const extra: string[] = [];
  if (weights) {
    const file = join(ctx.tmpDir, 'fair-quota-weights.json');
    writeFileSync(file, JSON.stringify({ tenants: { weights } }));
    extra.push('--config', file);
  }
  const pods = startPods(ctx, prefix, extra);
  const client = await benchClient(url, config);
  const llm = sessionLlm(server.baseUrl);
  // BENCH_FAIR_QUOTA_DEBUG: where each tenant's tasks spend their time (job-stages.ts).
  const stages = process.env.BENCH_FAIR_QUOTA_DEBUG ? new JobStages(admin, prefix) : undefined;
  stages?.start();
  try {
    await Promise.all(pods.map((p) => p.ready));
    const submit = (tenant: string, i: number, tasks: number) =>
      client.submit({
        instruction: `tenant${tenant} session ${i} with ${tasks} tasks`,
        tenant,
        config: { llm },
      });
    const sessions = [
      ...(await Promise.all(Array.from({ length: A_SESSIONS }, (_, i) => submit('A', i, A_TASKS)))),
      await submit('B', 0, B_TASKS),
    ];
    const metas = sessions.map((s) => sessionKeys(prefix, s.id).meta);
    const running = async (meta: string) => (await admin.hget(meta, 'state')) === 'RUNNING';
    // Every plan accepted (plans go first at the line), then until one tenant has none running.
    while ((await Promise.all(metas.map((m) => admin.hget(m, 'state')))).includes('PLANNING')) {
      await sleep(100);
    }
    for (;;) {
      const states = await Promise.all(metas.map(running));
      if (!states.slice(0, A_SESSIONS).some(Boolean) || !states[A_SESSIONS]) break;
      await sleep(100);
    }
    for (const [i, s] of sessions.entries()) {
      if (await running(metas[i] as string)) {
        await client.cancel(s.id);
        await pollSessionEnd(admin, metas[i] as string, s.id);
      }
    }
    const tasks = (tenant: string) => answered.filter((a) => a.task && a.tenant === tenant);
    const executions = (tenant: string) => tasks(tenant).filter((a) => a.execution);
    const from = Math.max(tasks('A')[0]?.at ?? 0, tasks('B')[0]?.at ?? 0) + 1_000;
    const to = Math.min(tasks('A').at(-1)?.at ?? 0, tasks('B').at(-1)?.at ?? 0) - 1_000;
    // Also while both still have executions to answer: under CPU load the judge pod lags (task
    // judgements seconds in its queue, job-stages.ts), and once a tenant's executions are done
    // its last judgements trickle out of that queue while the other's executions use the quota.
    const toExecuting =
      Math.min(executions('A').at(-1)?.at ?? 0, executions('B').at(-1)?.at ?? 0) - 1_000;
    const shareOf = (tenant: string, until: number) => {
      const within = answered.filter((a) => a.at >= from && a.at <= until);
      return within.filter((a) => a.tenant === tenant).length / within.length;
    };
    const calls = answered.filter((a) => a.at >= from && a.at <= to).length;
    const { accepted, refused } = server.quotaLog;
    const allowed = ((to - from) * QUOTA.requests) / QUOTA.perMs;
    const used = accepted.filter((t) => t >= from && t <= to).length / allowed;
    if (stages) {
      await stages.stop();
      const tenantOf = new Map(sessions.map((s, i) => [s.id, i < A_SESSIONS ? 'A' : 'B']));
      log(`fair-quota-tenants (${weights ? 'weighted' : 'equal'}), ${calls} calls in ${((to - from) / 1000).toFixed(1)} s, B ${(shareOf('B', to) * 100).toFixed(1)} % (${(shareOf('B', toExecuting) * 100).toFixed(1)} % while both executed, to ${((to - toExecuting) / 1000).toFixed(1)} s before), ${(used * 100).toFixed(1)} % of the quota used:
${stages.summary((id) => tenantOf.get(id), from, to)}`);
    }
    return {
      shareA: shareOf('A', to),
      shareB: shareOf('B', to),
      shareAExecuting: shareOf('A', toExecuting),
      shareBExecuting: shareOf('B', toExecuting),
      calls,
      span_s: (to - from) / 1000,
      quotaUsed: used,
      http429: refused.length / (accepted.length + refused.length),
    };
  } finally {
    await stages?.stop();
    await closeAll(client, pods, ctx);
    await server.close();
    await ctx.flush();
  }
}

async function runTenants(ctx: BenchContext): Promise<void> {
  process.env[KEY_ENV] = 'sk-bench-fair-quota';
  const context = {
    tenant_a: `${A_SESSIONS} sessions of ${A_TASKS} tasks`,
    tenant_b: `1 session of ${B_TASKS} tasks`,
    worker_pods: WORKER_PODS,
    slots_per_pod: SLOTS,
    model_ms: MODEL_MS,
    server_quota: `${QUOTA.requests} requests per ${QUOTA.perMs / 1000} s (token bucket)`,
  };
  const equal = await tenantShare(ctx);
  log(`fair-quota-tenants: equal weights, B's share ${(equal.shareB * 100).toFixed(1)} %`);
  const weighted = await tenantShare(ctx, { A: 3 });
  log(
    `fair-quota-tenants: B's share ${(equal.shareB * 100).toFixed(1)} % (equal weights), A's ${(weighted.shareA * 100).toFixed(1)} % with weights A 3 : B 1; 429s ${(equal.http429 * 100).toFixed(2)} %, ${(weighted.http429 * 100).toFixed(2)} %`,
  );
  ctx.reporter.record({
    name: 'fair.quota_tenant_share',
    value: equal.shareB,
    unit: 'ratio',
    goal: '>= 0.45',
    calls_counted: equal.calls,
    span_s: equal.span_s,
    quota_used: equal.quotaUsed,
    share_while_both_execute: equal.shareBExecuting,
    http_429_share: equal.http429,
    ...context,
  });
  ctx.reporter.record({
    name: 'fair.quota_tenant_share_weighted',
    value: weighted.shareA,
    unit: 'ratio',
    goal: '>= 0.7',
    weights: 'A 3, B 1',
    calls_counted: weighted.calls,
    span_s: weighted.span_s,
    quota_used: weighted.quotaUsed,
    share_while_both_execute: weighted.shareAExecuting,
    http_429_share: weighted.http429,
    ...context,
  });
}

export const fairQuota: BenchScenario = {
  name: 'fair-quota',
  description:
    'a 4-task session behind a 100-task one when the provider quota binds (every role on one key), over alone',
  run,
};

export const fairQuotaTenants: BenchScenario = {
  name: 'fair-quota-tenants',
  description:
    "tenant B's share of a binding provider quota against tenant A's 10 sessions, with equal weights and with A 3 : B 1",
  run: runTenants,
};
