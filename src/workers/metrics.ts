import { createServer, type Server } from 'node:http';
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

export interface MetricsServer {
  url: string;
  close(): Promise<void>;
}

/** A bare HTTP listener for Prometheus: GET /metrics, nothing else. */
export async function startMetricsServer(
  metrics: RoleMetrics,
  options: { host: string; port: number },
): Promise<MetricsServer> {
  const server: Server = createServer((request, response) => {
    if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
      response.writeHead(404).end();
      return;
    }
    metrics.registry.metrics().then(
      (text) => response.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
      () => response.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : options.port;
  return {
    url: `http://${options.host}:${port}/metrics`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
