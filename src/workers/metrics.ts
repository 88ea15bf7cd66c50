import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Role } from '../shared/queues.js';

/**
 * Prometheus metrics of a pod's role consumers (`orq start --metrics-port N`). What only the
 * consumer sees lives here: how long each job took, and which decisions its coordinator made. Queue depths, sessions by state and tokens
 * spent are read from Redis by the HTTP API's /metrics.
 */
export interface RoleMetrics {
  readonly registry: Registry;
  observeJob(role: Role, outcome: 'completed' | 'failed', seconds: number): void;
  /** Decisions the coordinator applied (refinement:accept, task:replan, ...), counted by kind. */
  countDecision(decision: string): void;
}

export function createRoleMetrics(): RoleMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'orq_pod_' });
  const duration = new Histogram({
    name: 'orq_job_duration_seconds',
    help: 'Time a role spent on one job (model calls included), by role and outcome.',
    labelNames: ['role', 'outcome'] as const,
    buckets: [0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900],
    registers: [registry],
  });
  const decisions = new Counter({
    name: 'orq_decisions_total',
    help: "Decisions applied by this pod's coordinator, by kind (refinement:replan, task:done, ...).",
    labelNames: ['decision'] as const,
    registers: [registry],
  });
  return {
    registry,
    observeJob: (role, outcome, seconds) => duration.observe({ role, outcome }, seconds),
    countDecision: (decision) => decisions.inc({ decision }),
  };
}
