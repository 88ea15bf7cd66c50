import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { Queue } from 'bullmq';
import type { ZodType } from 'zod';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { ALL_QUEUES, JobSchemas, ROLE_QUEUE, type QueueName } from '../../src/shared/queues.js';
import { root } from '../support/cli.js';
import { garbage, garbageWith, nearMisses } from '../support/fuzz.js';
import { bullQueue, Pods, queueEnv } from '../support/pods.js';
import { eventually, historyOf } from '../support/scenarios.js';

const diamond = resolve(root, 'examples/scenarios/diamond.yaml');
/** Fixed, so a failure replays exactly; FUZZ_SEED=<n> explores other inputs. */
const SEED = Number(process.env.FUZZ_SEED ?? 20_240_607);
const PER_KIND = 10;
const ROLE_OF = Object.fromEntries(
  Object.entries(ROLE_QUEUE).map(([role, queue]) => [queue, role]),
);

let pods: Pods | undefined;
let client: OrqClient | undefined;
const queues: Queue[] = [];
afterEach(async () => {
  await Promise.all(queues.splice(0).map((q) => q.close()));
  await client?.close();
  await pods?.stopAll();
  client = pods = undefined;
});

/** A valid payload of every job of every queue, about task A of `sessionId`. */
function validPayloads(sessionId: string): Record<QueueName, Record<string, unknown>> {
  const result = {
    output: 'done',
    log: '',
    artifacts: [],
    tokenUsage: { inputTokens: 1, outputTokens: 1 },
    durationMs: 5,
  };
  const tasks = [
    { id: 'A', title: 'A', acceptance: 'a', context: 'c', scopePaths: [], dependencies: [] },
  ];
  const plan = { summary: 'one task', tasks };
  const verdict = {
    success: true,
    shouldContinue: false,
    shouldReplan: false,
    reason: 'fine',
    missingRequirements: [],
  };
  return {
    plan: { plan: { sessionId, attempt: 0 } },
    judge: {
      'judge-plan': { sessionId, attempt: 0, plan },
      'judge-task': { sessionId, taskId: 'A', attempt: 1, result },
      'check-task': { sessionId, taskId: 'A' },
      'judge-result': { sessionId, round: 1 },
    },
    work: { execute: { sessionId, taskId: 'A', attempt: 1 }, integrate: { sessionId, round: 1 } },
    replan: { 'replan-task': { sessionId, taskId: 'A', attempt: 1 } },
    coordinator: {
      'plan-judged': {
        sessionId,
        attempt: 0,
        plan,
        judgement: { score: 90, isAcceptable: true, issues: [], suggestions: [] },
      },
      'task-judged': { sessionId, taskId: 'A', attempt: 1, result, judgement: verdict },
      'task-checked': { sessionId, taskId: 'A', judgement: verdict },
      integrated: {
        sessionId,
        round: 1,
        outcome: {
          status: 'merged',
          repository: '/repo',
          branch: `orq/${sessionId}/result`,
          baseCommit: 'abc',
          strategy: 'merge',
          tasks: [],
        },
      },
      'result-judged': { sessionId, round: 1, judgement: verdict },
      published: {
        sessionId,
        round: 1,
        pullRequest: { provider: 'github', url: 'https://forge.test/o/r/pull/1', number: 1 },
      },
      'task-replanned': { sessionId, taskId: 'A', attempt: 1, breakdown: { reason: 'r', tasks } },
      cancel: { sessionId, reason: 'stop' },
      resume: { sessionId, mode: 'retry', requestId: 'r1' },
      'job-failed': { sessionId, role: 'worker', attempt: 1, jobId: 'j1', error: 'boom' },
      answer: { sessionId, waitId: 'plan-0', requestId: 'r1', answer: { action: 'approve' } },
      'wait-timed-out': { sessionId, waitId: 'plan-0' },
      'step-waiting': {
        sessionId,
        taskId: 'A',
        attempt: 1,
        request: { kind: 'question', step: 2, question: 'staging or production?' },
      },
      notify: {
        sessionId,
        event: 'wait.opened',
        waitId: 'plan-0',
        kind: 'plan-approval',
        state: 'AWAITING_APPROVAL',
        at: '2026-11-28T00:00:00.000Z',
      },
    },
  };
}

interface Sent {
  queue: QueueName;
  name: string;
  jobId: string;
  /** The payload names the known session: its failure must be in that session's history. */
  known: boolean;
}

describe('bad job payloads into every consumer', () => {
  it('fails each one clearly, records those of a known session in its history, and keeps the pod serving', async () => {
    const url = inject('redisUrl');
    const prefix = `f${randomUUID().slice(0, 8)}`;
    pods = new Pods({
      REDIS_URL: url,
      ORQ_PREFIX: prefix,
      ...queueEnv({ attempts: 2, backoffMs: 10 }),
    });
    const pod: ChildProcess = await pods.start('planner,judge,worker,replanner,coordinator');
    client = await createClient({ connection: url, prefix });
    const known = await client.submit({
      instruction: 'diamond',
      config: { llm: { scenario: diamond } },
    });
    const before = await client.wait(known.id, { timeoutMs: 30_000 });
    expect(before.session.state).toBe('COMPLETED');
    const historyBefore = await historyOf(client, known.id);

    const valid = validPayloads(known.id);
    const sent: Sent[] = [];
    let seed = SEED;
    for (const queue of ALL_QUEUES) {
      const bull = bullQueue(client.store.redis, prefix, queue);
      queues.push(bull);
      const schemas = JobSchemas[queue] as Record<string, ZodType>;
      const batches: [string, unknown[], boolean][] = [];
      for (const [name, schema] of Object.entries(schemas)) {
        expect(schema.safeParse(valid[queue][name]).success, `${queue}/${name} base`).toBe(true);
        const options = { count: PER_KIND, seed: seed++ };
        batches.push(
          [name, garbage(schema, options), false],
          [
            name,
            garbageWith(
              valid[queue][name] as Record<string, unknown>,
              { sessionId: known.id },
              schema,
              options,
            ),
            true,
          ],
          [name, nearMisses(valid[queue][name], schema, { ...options, keep: ['sessionId'] }), true],
          // Valid payloads about a session that does not exist.
          [name, [{ ...(valid[queue][name] as object), sessionId: randomUUID() }], false],
        );
      }
      // A job name the queue does not have, for a known session.
      batches.push(['bogus', [valid[queue][Object.keys(schemas)[0]!]], true]);
      for (const [name, payloads, isKnown] of batches) {
        for (const data of payloads) {
          const job = await bull.add(name, data, { attempts: 2, backoff: 10 });
          sent.push({ queue, name, jobId: job.id!, known: isKnown });
        }
      }
    }
    expect(sent.length).toBeGreaterThan(200);

    // Every job reaches an end, and so do the job-failed events they raise.
    await eventually(
      async () => {
        for (const bull of queues) {
          const c = await bull.getJobCounts('waiting', 'active', 'delayed', 'prioritized');
          if (Object.values(c).some((n) => n > 0)) return undefined;
        }
        return true;
      },
      'every fuzzed job to finish',
      60_000,
    );
    const byQueue = new Map(queues.map((q) => [q.name as QueueName, q]));
    for (const s of sent) {
      const job = await byQueue.get(s.queue)!.getJob(s.jobId);
      const state = await job?.getState();
      // Bad payloads fail (valid ones about an unknown session may end either way), clearly.
      if (s.known) {
        expect(state, `${s.queue}/${s.name} ${JSON.stringify(job?.data)}`).toBe('failed');
        expect(job?.failedReason).toMatch(/^Invalid /);
      } else expect(['failed', 'completed']).toContain(state);
    }

    // The pod is alive, the known session unchanged but for one error entry per bad job.
    expect(pod.exitCode).toBeNull();
    expect(pod.signalCode).toBeNull();
    const after = await client.get(known.id);
    expect(after.session).toEqual(before.session);
    expect(after.tasks).toEqual(before.tasks);
    const added = (await historyOf(client, known.id)).slice(historyBefore.length);
    const errors = added.filter((e) => e.type === 'error');
    for (const s of sent.filter((x) => x.known)) {
      const mentions = errors.filter(
        (e) => e.type === 'error' && e.message.includes(` ${s.jobId}:`),
      );
      const matching = mentions.filter((e) =>
        s.queue === 'coordinator'
          ? e.role === 'coordinator' && e.message.startsWith(`rejected ${s.name} event`)
          : e.role === ROLE_OF[s.queue] && e.message.startsWith('malformed job'),
      );
      expect(matching, `${s.queue}/${s.name} job ${s.jobId}`).toHaveLength(1);
      expect(matching[0]).toMatchObject({ code: 'VALIDATION_FAILED' });
    }
    expect(errors).toHaveLength(sent.filter((x) => x.known).length);
    expect(added.every((e) => e.type === 'error' || e.type === 'decision')).toBe(true);
    // Nothing was written for sessions that do not exist.
    const sessionKeys = await client.store.redis.keys(`${prefix}:s:*`);
    expect(new Set(sessionKeys.map((k) => /\{(.+?)\}/.exec(k)?.[1]))).toEqual(new Set([known.id]));

    // And the same pod still runs a valid session to its end.
    const next = await client.submit({
      instruction: 'diamond',
      config: { llm: { scenario: diamond } },
    });
    expect((await client.wait(next.id, { timeoutMs: 30_000 })).session.state).toBe('COMPLETED');
  }, 120_000);
});
