import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { isFailedAttempt, type HttpAttemptEvents } from './llm/http-attempts.js';
import type { QuotaEvents } from './llm/quota.js';
import type { Role } from '../shared/queues.js';
import type { ModelCallEvents } from './llm/genai.js';

/**
 * Prometheus metrics of a pod's role consumers (`orq start --metrics-port N`). What only the
 * consumer sees lives here: how long each job took, and which decisions its coordinator made. Queue depths, sessions by state and tokens
 * spent are read from Redis by the HTTP API's /metrics. The HTTP requests of model calls are
 * counted per attempt: an SDK retries inside one (logical) call.
 */
export interface RoleMetrics extends QuotaEvents, HttpAttemptEvents, ModelCallEvents {
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
  const quotaWaits = new Counter({
    name: 'orq_quota_waits_total',
    help: "Model calls of this pod that found their provider's quota short (or paused after a 429) and waited or handed their job back, by limit and reason.",
    labelNames: ['limit', 'reason'] as const,
    registers: [registry],
  });
  const quota429s = new Counter({
    name: 'orq_quota_429_total',
    help: 'Answers 429 this pod got from a provider under a rateLimit, by limit.',
    labelNames: ['limit'] as const,
    registers: [registry],
  });
  const llmLabels = ['provider', 'model', 'role'] as const;
  const llmRequests = new Counter({
    name: 'orq_llm_http_requests_total',
    help: "HTTP requests this pod's model calls sent, retries included, by provider kind, model, role and status (an HTTP code, or connection / aborted when no answer came).",
    labelNames: [...llmLabels, 'status'] as const,
    registers: [registry],
  });
  const llmRetries = new Counter({
    name: 'orq_llm_http_retries_total',
    help: 'HTTP requests sent again for the same model call after a failed one (SDK retries of 429, 5xx, timeouts; a retry after a rateLimit pause).',
    labelNames: llmLabels,
    registers: [registry],
  });
  const llmErrors = new Counter({
    name: 'orq_llm_http_errors_total',
    help: 'HTTP requests of model calls that failed (no answer, or a status other than 2xx), by status; a call whose retry succeeded still counts its failed requests here.',
    labelNames: [...llmLabels, 'status'] as const,
    registers: [registry],
  });
  const llmLatency = new Histogram({
    name: 'orq_llm_http_request_duration_seconds',
    help: 'Time from sending an HTTP request of a model call to its answer (or its failure).',
    labelNames: llmLabels,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300],
    registers: [registry],
  });
  // The GenAI conventions' client metrics, in Prometheus' spelling of their names and attributes
  // (gen_ai.client.token.usage → gen_ai_client_token_usage), with orq's role beside them.
  const genAiLabels = [
    'gen_ai_operation_name',
    'gen_ai_provider_name',
    'gen_ai_request_model',
    'orq_role',
  ] as const;
  const genAiTokens = new Histogram({
    name: 'gen_ai_client_token_usage',
    help: 'Tokens of one model call (gen_ai.client.token.usage), by provider, model, role and token type (input, output).',
    labelNames: [...genAiLabels, 'gen_ai_token_type'] as const,
    buckets: [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304],
    registers: [registry],
  });
  const genAiDuration = new Histogram({
    name: 'gen_ai_client_operation_duration_seconds',
    help: 'Time of one model call, retries included (gen_ai.client.operation.duration), by provider, model, role and error type (empty when it succeeded).',
    labelNames: [...genAiLabels, 'error_type'] as const,
    buckets: [
      0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
    ],
    registers: [registry],
  });
  return {
    registry,
    modelCall: (target, outcome) => {
      const labels = {
        gen_ai_operation_name: 'chat',
        gen_ai_provider_name: target.provider,
        gen_ai_request_model: target.model,
        orq_role: target.role,
      };
      genAiDuration.observe({ ...labels, error_type: outcome.errorType ?? '' }, outcome.seconds);
      if (outcome.usage) {
        genAiTokens.observe({ ...labels, gen_ai_token_type: 'input' }, outcome.usage.inputTokens);
        genAiTokens.observe({ ...labels, gen_ai_token_type: 'output' }, outcome.usage.outputTokens);
      }
    },
    httpAttempt: (target, attempt) => {
      const labels = { provider: target.provider, model: target.model, role: target.role };
      const status = String(attempt.status);
      llmRequests.inc({ ...labels, status });
      if (attempt.retry) llmRetries.inc(labels);
      if (isFailedAttempt(attempt)) llmErrors.inc({ ...labels, status });
      llmLatency.observe(labels, attempt.seconds);
    },
    waited: (limit, reason) => quotaWaits.inc({ limit, reason }),
    throttled: (limit) => quota429s.inc({ limit }),
    observeJob: (role, outcome, seconds) => duration.observe({ role, outcome }, seconds),
    countDecision: (decision) => decisions.inc({ decision }),
  };
}
