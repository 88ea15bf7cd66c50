import type { BarPanel, Figure } from './chart.js';
import { formatValue } from './chart.js';
import type { Measurement, RunInfo } from './report.js';

/** The one chart of a run, built from its measurements; panels without data are left out. */
export function summaryFigure(measurements: Measurement[], run: RunInfo): Figure {
  const byName = new Map(measurements.map((m) => [m.name, m]));
  const value = (name: string) => byName.get(name)?.value;
  const panels: BarPanel[] = [];

  const ratios = measurements
    .filter((m) => m.name.startsWith('overhead_ratio'))
    .sort((a, b) => Number(a.tasks) - Number(b.tasks));
  if (ratios.length > 0) {
    panels.push({
      title: `1. Overhead: orq / raw BullMQ = ${formatValue(value('overhead_ratio') ?? Number.NaN)} at 1,000 tasks (goal ≥ 0.7)`,
      unit: 'queue hops / s',
      note: 'one session of N independent tasks; same queues, concurrency and Redis; label: hops/s (ratio)',
      groups: ratios.map((m) => ({
        label: `${String(m.tasks)} tasks`,
        bars: [
          {
            series: 'orq',
            value: Number(m.orq_hops_per_s),
            label: `${formatValue(Number(m.orq_hops_per_s))} (${formatValue(m.value)})`,
          },
          { series: 'raw BullMQ', value: Number(m.raw_hops_per_s) },
        ],
      })),
    });
  }

  const shapes = measurements.filter(
    (m) => m.name.startsWith('shape.') && m.name.endsWith('.coordinator_ms_per_task'),
  );
  if (shapes.length > 0) {
    const base = value('shape.dag_100.coordinator_ms_per_task');
    const costRatio = value('coordinator_cost_ratio_10000_vs_100');
    panels.push({
      title: `2. Coordinator cost per task; largest DAG / DAG 100 = ${formatValue(costRatio ?? Number.NaN)} (goal ≤ 1.5)`,
      unit: 'ms per task-judged event',
      note: 'mean wall time of applyEvent, coordinator at concurrency 1',
      groups: shapes.map((m) => ({
        label: String(m.shape ?? m.name)
          .replace('lattice_', 'lattice ')
          .replace('_', ' '),
        bars: [{ series: 'coordinator ms/task', value: m.value }],
      })),
      ...(base !== undefined ? { refLines: [{ value: base * 1.5, label: '1.5 × DAG 100' }] } : {}),
    });
  }

  const efficiency = measurements.filter(
    (m) => m.name.startsWith('scaling.') && m.name.endsWith('.efficiency'),
  );
  if (efficiency.length > 0) {
    panels.push({
      title: '3. Scaling: throughput / ideal (workers × C ÷ 50 ms)',
      unit: 'efficiency',
      note: `concurrency ${String(efficiency[0]?.concurrency_per_worker ?? '?')} per worker process; label: tasks/s of ideal`,
      minTop: 1,
      refLines: [{ value: 1, label: 'ideal' }],
      groups: efficiency.map((m) => {
        const tps = value(`scaling.workers_${String(m.workers)}.tasks_per_s`) ?? Number.NaN;
        return {
          label: `${String(m.workers)} worker proc.`,
          bars: [
            {
              series: 'efficiency',
              value: m.value,
              label: `${formatValue(tps)}/${formatValue(Number(m.ideal_tasks_per_s))}`,
            },
          ],
        };
      }),
    });
  }

  const noise = measurements.filter(
    (m) => m.name.startsWith('judge_noise.') && m.name.endsWith('.wrong_decision_rate'),
  );
  if (noise.length > 0) {
    const sigmas = [...new Set(noise.map((m) => Number(m.sigma)))];
    const variantOf = (m: Measurement) => m.name.split('.')[2] ?? '?';
    const group = (suffix: string, scale: number) =>
      sigmas.map((sigma) => ({
        label: `σ = ${sigma}`,
        bars: noise
          .filter((m) => Number(m.sigma) === sigma)
          .map((m) => {
            const name = m.name.replace('.wrong_decision_rate', suffix);
            return { series: variantOf(m), value: (value(name) ?? Number.NaN) * scale };
          }),
      }));
    panels.push({
      title: '4a. Judge noise: wrong accept/replan/reject decisions',
      unit: '% of decisions',
      note: 'nt = noiseThreshold (1 = off), k = median of k judges, nostag = stagnation thresholds 0',
      groups: group('.wrong_decision_rate', 100),
    });
    panels.push({
      title: '4b. Judge noise: LLM calls per session',
      unit: 'calls (plans + judgements)',
      groups: group('.llm_calls_per_session', 1),
    });
  }

  const latency = ['p50', 'p95'].flatMap((p) => {
    const orq = value(`latency.orq_${p}_ms`);
    const raw = value(`latency.raw_${p}_ms`);
    return orq === undefined || raw === undefined
      ? []
      : [
          {
            label: p,
            bars: [
              { series: 'orq', value: orq },
              { series: 'raw BullMQ', value: raw },
            ],
          },
        ];
  });
  if (latency.length > 0) {
    panels.push({
      title: '5. Latency per dependency edge (worker done → dependent starts)',
      unit: 'ms',
      note: `chain of ${String(byName.get('latency.orq_p50_ms')?.chain_length ?? '?')}, work job i+1 active − job i completed`,
      groups: latency,
    });
  }

  const startup = ['node', 'bullmq_import', 'orq_version', 'orq_status', 'orq_start_ready'].flatMap(
    (name) => {
      const ms = value(`startup.${name}_ms`);
      return ms === undefined
        ? []
        : [{ label: name.replaceAll('_', ' '), bars: [{ series: 'ms', value: ms }] }];
    },
  );
  if (startup.length > 0) {
    panels.push({
      title: '6. Start-up: one process from spawn to exit (a pod: to ready), compiled CLI',
      unit: 'ms',
      note: 'median; node = node -e "", bullmq import = a process that only imports BullMQ',
      groups: startup,
    });
  }

  const machine = run.machine;
  return {
    title: `orq benchmarks — ${run.quick ? 'quick' : 'full'} run, ${run.startedAt.slice(0, 16).replace('T', ' ')} UTC`,
    subtitle: `${String(machine.cpus)} cores (${String(machine.cpuModel)}), Node ${String(machine.node)}, Redis ${String(machine.redis)}, BullMQ ${String(machine.bullmq)}; load average at start ${JSON.stringify(machine.loadAverageAtStart)}; ${run.durationS ?? '?'} s`,
    panels,
  };
}
