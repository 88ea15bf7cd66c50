import type { BenchContext, BenchScenario } from '../lib/context.js';
import {
  benchClient,
  benchConfig,
  completedJobs,
  runSession,
  startInProcessRoles,
  writePlanScenario,
} from '../lib/orq.js';
import { independentTasks } from '../lib/plans.js';
import { spawnOrqStart, stopPods, type OrqPod } from '../lib/processes.js';
import { log } from '../lib/report.js';
import { cpuMsSince } from '../lib/timing.js';

const LATENCY_MS = 50;
const CONCURRENCY = 4;
const WORKER_COUNTS = [1, 2, 4, 8];
/** Concurrency of the in-process planner, judge, replanner and coordinator. */
const CENTRAL_CONCURRENCY = 16;

/**
 * 3. Scaling: 1, 2, 4 and 8 `orq start --roles worker` processes, each with concurrency C and
 * a simulated model latency of 50 ms, against the ideal workers × C ÷ latency. The other roles
 * run in this process with zero latency. Throughput is tasks ÷ (session COMPLETED − first
 * work job started), so planning and process start-up are left out.
 */
async function run(ctx: BenchContext): Promise<void> {
  const rounds = ctx.quick ? 20 : 50;
  const { url, admin } = ctx.redis;
  const config = benchConfig('scaling');
  const prefix = config.redis.prefix;
  const roles = await startInProcessRoles(
    url,
    config,
    ['planner', 'judge', 'replanner', 'coordinator'],
    {
      concurrency: CENTRAL_CONCURRENCY,
    },
  );
  const client = await benchClient(url, config);
  const pods: OrqPod[] = [];
  try {
    for (const workers of WORKER_COUNTS) {
      while (pods.length < workers) {
        const pod = spawnOrqStart(
          [
            '--roles',
            'worker',
            '--concurrency',
            String(CONCURRENCY),
            '--latency',
            String(LATENCY_MS),
          ],
          url,
          prefix,
        );
        pods.push(pod);
        ctx.pods.add(pod);
      }
      await Promise.all(pods.map((p) => p.ready));
      const slots = workers * CONCURRENCY;
      // Warm every process (JIT, connections) before the measured session.
      await runSession(
        client,
        admin,
        prefix,
        writePlanScenario(ctx.tmpDir, `scaling-warm-${workers}`, independentTasks(slots * 2)),
      );
      const tasks = slots * rounds;
      const scenario = writePlanScenario(ctx.tmpDir, `scaling-${workers}`, independentTasks(tasks));
      const cpu = process.cpuUsage();
      const result = await runSession(client, admin, prefix, scenario);
      const centralCpuMs = cpuMsSince(cpu);
      const jobs = (await completedJobs(admin, prefix, 'work')).filter(
        (j) => (j.data as { sessionId?: string }).sessionId === result.sessionId,
      );
      const firstStart = Math.min(...jobs.map((j) => j.processedOn ?? Number.POSITIVE_INFINITY));
      const seconds = (result.completedAt - firstStart) / 1000;
      const throughput = tasks / seconds;
      const ideal = slots / (LATENCY_MS / 1000);
      const context = {
        workers,
        concurrency_per_worker: CONCURRENCY,
        latency_ms: LATENCY_MS,
        tasks,
        ideal_tasks_per_s: ideal,
        measured_s: seconds,
        // Near 1 means the in-process judge + coordinator use a whole core: the ceiling.
        central_process_cpu_share: centralCpuMs / (result.completedAt - result.submittedAt),
        central_roles: `planner, judge, replanner, coordinator in the bench process (concurrency ${CENTRAL_CONCURRENCY})`,
      };
      log(
        `scaling ${workers} worker process(es): ${throughput.toFixed(0)} tasks/s of ideal ${ideal} (${tasks} tasks)`,
      );
      ctx.reporter.record({
        name: `scaling.workers_${workers}.tasks_per_s`,
        value: throughput,
        unit: 'tasks/s',
        ...context,
      });
      ctx.reporter.record({
        name: `scaling.workers_${workers}.efficiency`,
        value: throughput / ideal,
        unit: 'ratio',
        ...context,
      });
    }
  } finally {
    await client.close();
    await stopPods(pods, ctx.pods);
    await roles.close(5_000);
    await ctx.flush();
  }
}

export const scaling: BenchScenario = {
  name: 'scaling',
  description: '1, 2, 4, 8 worker processes with 50 ms model latency vs the ideal throughput',
  run,
};
