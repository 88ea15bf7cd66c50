import { createHmac } from 'node:crypto';
import type { Job } from 'bullmq';
import type { WebhookConfig } from '../../shared/config/schema.js';
import { ValidationError } from '../../shared/errors.js';
import { providerKey } from '../../shared/config/provider-keys.js';
import type { Logger } from '../../shared/logger.js';
import type { QueueSet } from '../../shared/queue-set.js';
import { NotifyJob, outboxJob } from '../../shared/queues.js';

/**
 * notifications.webhook (issue 48): a session started or stopped waiting for a person. The
 * coordinator's transition queues a `notify` job with the event; a coordinator pod posts it,
 * signed, and on a failure queues the next try delayed by an exponential backoff, under an id
 * of its own (the same try is never queued twice, whatever dies when), until
 * webhook.attempts tries are spent. Each try is a job, so waiting for the next holds nothing.
 */

export const SIGNATURE_HEADER = 'x-orq-signature';

/** `sha256=<hex>` of `<timestamp>.<body>` under the secret: what a receiver recomputes. */
export function webhookSignature(secret: string, timestamp: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

/** The delay before try `next` (2, 3, ...): backoffMs, doubled each try. */
export const webhookBackoffMs = (backoffMs: number, next: number): number =>
  backoffMs * 2 ** (next - 2);

export interface WebhookOutcome {
  status: 'SENT' | 'SKIPPED' | 'RETRY_QUEUED' | 'GAVE_UP';
  reason?: string;
}

export function createWebhookProcessor(
  config: WebhookConfig | undefined,
  queues: QueueSet,
  logger: Logger,
  /** A malformed notify job goes where a malformed event goes: recorded in its session, failed. */
  malformed: (job: Job) => Promise<unknown>,
  env: NodeJS.ProcessEnv = process.env,
) {
  return async (job: Job): Promise<WebhookOutcome> => {
    const parsed = NotifyJob.safeParse(job.data);
    if (!parsed.success) {
      await malformed(job);
      // applyEvent refuses it; should it not, the job still fails as malformed.
      throw ValidationError.fromZod('notify job', parsed.error);
    }
    const event = parsed.data;
    const log = logger.child({ sessionId: event.sessionId, jobId: job.id, waitId: event.waitId });
    if (!config) return { status: 'SKIPPED', reason: 'no notifications.webhook configured' };
    const secret = providerKey(config.secretEnv, env);
    if (!secret) {
      log.warn({ variable: config.secretEnv }, 'webhook not sent: its secret is not set');
      return { status: 'SKIPPED', reason: `${config.secretEnv} is not set` };
    }
    const { traceparent: _trace, attempt, deliveryId, ...payload } = event;
    const delivery = deliveryId ?? String(job.id);
    const body = JSON.stringify({ ...payload, deliveryId: delivery });
    const timestamp = String(Math.floor(Date.now() / 1000));
    let failure: string;
    try {
      const response = await fetch(config.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-orq-event': event.event,
          'x-orq-delivery': delivery,
          'x-orq-timestamp': timestamp,
          [SIGNATURE_HEADER]: webhookSignature(secret, timestamp, body),
        },
        body,
        signal: AbortSignal.timeout(config.timeoutMs),
      });
      await response.body?.cancel();
      if (response.ok) {
        log.info({ event: event.event, attempt }, 'webhook delivered');
        return { status: 'SENT' };
      }
      failure = `the webhook answered ${response.status}`;
    } catch (error) {
      failure = `the webhook could not be reached: ${(error as Error).message}`;
    }
    if (attempt >= config.attempts) {
      log.error({ attempt, reason: failure }, 'webhook given up');
      return { status: 'GAVE_UP', reason: failure };
    }
    const next = attempt + 1;
    await queues.add({
      ...outboxJob('coordinator', 'notify', `${delivery}|try${next}`, {
        ...event,
        attempt: next,
        deliveryId: delivery,
      }),
      notBefore: Date.now() + webhookBackoffMs(config.backoffMs, next),
    });
    log.warn({ attempt, reason: failure }, 'webhook failed; the next try is queued');
    return { status: 'RETRY_QUEUED', reason: failure };
  };
}
