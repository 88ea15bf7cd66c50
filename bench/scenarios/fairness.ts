import { Role } from '../../src/shared/queues.js';
import { criticalPaths } from '../../src/shared/rules/critical-path.js';
import type { BenchContext, BenchScenario } from '../lib/context.js';
import {
  benchClient,
  benchConfig,
  pollSessionEnd,
  runSession,
  startInProcessRoles,
  writePlanScenario,
} from '../lib/orq.js';
import { independentTasks, randomDag, type BenchTask } from '../lib/plans.js';
import { log } from '../lib/report.js';
import { median } from '../lib/stats.js';
import { sleep } from '../lib/timing.js';
import { sessionKeys } from '../../src/shared/store/keys.js';

/** Simulated model latency of every call (plan, judge, execute) in both benchmarks. */
const LATENCY_MS = 200;
/** Jobs in parallel per role: the same pods for the small session alone and behind. */
const SLOTS = 16;
const ROUNDS = 3;

/**
 * fair.small_behind_big_ratio (issue 33): a 4-task session's time behind a big session's
 * backlog over its time alone, with the same pods (every role in this process, SLOTS jobs per
 * role, LATENCY_MS per model call). Before fair release the small session waited behind the
 * whole backlog (49-50x with 150 tasks, linear in the size).
 */
async function smallBehindBig(ctx: BenchContext): Promise<void> {
  const bigTasks = ctx.quick ? 2_000 : 10_000;
  const { url, admin } = ctx.redis;
  const config = benchConfig('fair', { concurrency: perRole(SLOTS) });
  const prefix = config.redis.prefix;
  const small = writePlanScenario(ctx.tmpDir, 'fair-small', independentTasks(4));
  const big = writePlanScenario(ctx.tmpDir, 'fair-big', independentTasks(bigTasks));
  const roles = await startInProcessRoles(url, config, Role.options, { latencyMs: LATENCY_MS });
  const client = await benchClient(url, config);
  try {
    // Warm-up, discarded.
    await runSession(client, admin, prefix, small);
    const alone: number[] = [];
    for (let i = 0; i < ROUNDS; i += 1)
      alone.push((await runSession(client, admin, prefix, small)).ms);

    const behind: number[] = [];
    const backlog: number[] = [];
    for (let i = 0; i < ROUNDS; i += 1) {
      const submitted = await client.submit({
        instruction: 'big session',
        config: { llm: { scenario: big } },
      });
      // The backlog is there once the plan is accepted, every work job is in the queue (the
      // session's outbox is empty: adding 10,000 jobs takes seconds) and the first tasks are done.
      const keys = sessionKeys(prefix, submitted.id);
      const meta = keys.meta;
      for (;;) {
        const [state, open] = await admin.hmget(meta, 'state', 'open');
        const unsent = await admin.hlen(keys.outbox);
        if (state === 'RUNNING' && unsent === 0 && Number(open) <= bigTasks - SLOTS) break;
        await sleep(20);
      }
      behind.push((await runSession(client, admin, prefix, small)).ms);
      backlog.push(Number(await admin.hget(meta, 'open')));
      // Before fair release the big session could end first: nothing to cancel then.
      await client.cancel(submitted.id).catch(() => undefined);
      await pollSessionEnd(admin, meta, submitted.id);
    }
    const aloneMs = median(alone);
    const behindMs = median(behind);
    log(
      `fairness: 4 tasks alone ${aloneMs.toFixed(0)} ms, behind ${bigTasks} ${behindMs.toFixed(0)} ms`,
    );
    ctx.reporter.record({
      name: 'fair.small_behind_big_ratio',
      value: behindMs / aloneMs,
      unit: 'ratio',
      goal: '<= 1.3',
      alone_ms: aloneMs,
      behind_ms: behindMs,
      rounds_alone_ms: alone,
      rounds_behind_ms: behind,
      big_session_tasks: bigTasks,
      big_session_open_tasks_after: backlog,
      slots_per_role: SLOTS,
      latency_ms: LATENCY_MS,
      ...(ctx.quick ? { note: 'quick run: the 10,000-task session is reduced to 2,000' } : {}),
    });
  } finally {
    await client.close();
    await roles.close(5_000);
  }
}

/** Worker slots of the makespan benchmark: fewer than the DAG's ready tasks. */
const MAKESPAN_WORKERS = 4;
const MAKESPAN_LIMIT = 2 * MAKESPAN_WORKERS;

/**
 * makespan.ratio (issue 33): random DAGs with simulated latency and fewer worker slots than
 * ready tasks; the session's time from plan acceptance to its end over the lower bound
 * max(critical path, total work / slots). A task on a chain takes an execution and a judgement
 * (LATENCY_MS each); the workers' work is one execution per task, the judges have slots enough.
 */
async function makespan(ctx: BenchContext): Promise<void> {
  const sizes = ctx.quick ? [100] : [100, 300];
  const { url, admin } = ctx.redis;
  // A session limit keeps the ready tasks in the session's ready set, where the longest critical
  // path goes first; without one, a task that becomes ready goes behind the tasks already
  // queued, however long its path. Twice the worker slots: a task holds its slot until it is
  // judged, and the workers run others meanwhile.
  const config = benchConfig('mksp', {
    concurrency: { ...perRole(SLOTS), worker: MAKESPAN_WORKERS },
    scheduling: { maxTasksInFlight: MAKESPAN_LIMIT },
  });
  const prefix = config.redis.prefix;
  const roles = await startInProcessRoles(url, config, Role.options, { latencyMs: LATENCY_MS });
  const client = await benchClient(url, config);
  try {
    for (const n of sizes) {
      const ratios: number[] = [];
      let bound = 0;
      let longest = 0;
      for (let seed = 1; seed <= ROUNDS; seed += 1) {
        const tasks = randomDag(n, seed * 7919, 3, 16);
        longest = longestChain(tasks);
        bound = Math.max(longest * 2 * LATENCY_MS, (n * LATENCY_MS) / MAKESPAN_WORKERS);
        const path = writePlanScenario(ctx.tmpDir, `mksp-${n}-${seed}`, tasks);
        const run = await runSession(client, admin, prefix, path);
        const accepted = (await client.history(run.sessionId)).find(
          (h) =>
            h.entry.type === 'state_change' &&
            h.entry.entity === 'session' &&
            h.entry.to === 'RUNNING',
        );
        const start = accepted ? Date.parse(accepted.entry.timestamp) : run.submittedAt;
        ratios.push((run.completedAt - start) / bound);
      }
      log(`makespan: ${n} tasks, ratios ${ratios.map((r) => r.toFixed(2)).join(', ')}`);
      ctx.reporter.record({
        name: n === sizes[0] ? 'makespan.ratio' : `makespan.ratio_${n}`,
        value: median(ratios),
        unit: 'ratio',
        goal: '<= 1.15',
        tasks: n,
        rounds: ratios,
        last_bound_ms: bound,
        last_critical_path_tasks: longest,
        worker_slots: MAKESPAN_WORKERS,
        max_tasks_in_flight: MAKESPAN_LIMIT,
        latency_ms: LATENCY_MS,
      });
    }
  } finally {
    await client.close();
    await roles.close(5_000);
  }
}

function perRole(slots: number) {
  return Object.fromEntries(Role.options.map((r) => [r, slots])) as Record<Role, number>;
}

/** Tasks on the DAG's longest chain. */
function longestChain(tasks: BenchTask[]): number {
  const dependents = new Map<string, string[]>();
  for (const t of tasks) {
    for (const d of t.dependencies ?? []) dependents.set(d, [...(dependents.get(d) ?? []), t.id]);
  }
  const paths = criticalPaths(
    tasks.map((t) => ({ id: t.id, dependents: dependents.get(t.id) ?? [] })),
  );
  return Math.max(...paths.values());
}

export const fairness: BenchScenario = {
  name: 'fairness',
  description:
    'fair release: a 4-task session behind a big backlog over alone; random DAGs over their makespan lower bound',
  async run(ctx) {
    await smallBehindBig(ctx);
    await ctx.flush();
    await makespan(ctx);
  },
};
