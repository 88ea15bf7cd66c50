import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningHttpServer } from '../../src/producers/http/server.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import { startCluster, type TestCluster } from '../support/cluster.js';
import { render, type Manifest } from '../support/kustomize.js';
import { desiredReplicas, evaluateScalerQuery } from '../support/promql.js';
import { eventually, recordingModels } from '../support/scenarios.js';
import { bearer, serveApi } from '../support/http.js';

// What the KEDA ScaledObjects of deploy/kubernetes read, under load: their own PromQL query,
// evaluated over the dashboard's /metrics while jobs pile up in a queue no pod consumes, then
// drain once a pod of that role starts. Jobs wait in BullMQ's `prioritized` state (fair
// scheduling gives each a priority), so a scaler on the wait list alone would read 0.

const TOKEN = 'scaler-token-0123456789abcdef';
const SESSIONS = 8;
const TIMEOUT = 20_000;
const THREE_AT_ONCE: ScenarioInput = {
  plans: [
    {
      tasks: ['A', 'B', 'C'].map((id) => ({ id, title: id, acceptance: 'a', context: 'c' })),
    },
  ],
  planJudgements: [{ score: 90, isAcceptable: true }],
};

type Trigger = { metadata: { query: string; threshold: string } };
type Scaled = Manifest & {
  spec: {
    scaleTargetRef: { name: string };
    minReplicaCount: number;
    maxReplicaCount: number;
    triggers: Trigger[];
  };
};

const overlay = fileURLToPath(
  new URL('../../deploy/kubernetes/overlays/production', import.meta.url),
);
const scalerOf = (role: string) => {
  const found = render(join(overlay))
    .filter((m): m is Scaled => m.kind === 'ScaledObject')
    .find((s) => s.spec.scaleTargetRef.name === `orq-${role}`);
  if (!found) throw new Error(`no ScaledObject for ${role}`);
  const { query, threshold } = found.spec.triggers[0]!.metadata;
  return {
    query,
    threshold: Number(threshold),
    min: found.spec.minReplicaCount,
    max: found.spec.maxReplicaCount,
  };
};

let cluster: TestCluster;
let server: RunningHttpServer;
let ids: string[];

beforeAll(async () => {
  // No pod yet: each role's pod is started by the test that needs its queue drained.
  cluster = await startCluster({ pods: 0, models: recordingModels(THREE_AT_ONCE).models });
  server = await serveApi(cluster.client, { token: TOKEN });
}, 30_000);

afterAll(async () => {
  await server?.close();
  await cluster?.close();
});

async function scrape(): Promise<string> {
  const res = await fetch(`${server.url}/metrics`, {
    headers: bearer(TOKEN),
  });
  expect(res.status).toBe(200);
  return res.text();
}

const sample = (text: string, queue: string, state: string) =>
  Number(
    new RegExp(`^orq_queue_jobs\\{queue="${queue}",state="${state}"\\} (\\d+)$`, 'm').exec(
      text,
    )?.[1],
  );

/** The scaler's reading, polled until `accept` takes it. */
async function reading(
  query: string,
  accept: (value: number) => boolean,
  what: string,
): Promise<number> {
  return eventually(
    async () => {
      const value = evaluateScalerQuery(query, await scrape());
      return value !== undefined && accept(value) ? value : undefined;
    },
    what,
    TIMEOUT,
  );
}

describe('the metric each ScaledObject reads', () => {
  it('counts the plan jobs of sessions no planner has taken, then drains', async () => {
    const planner = scalerOf('planner');
    await cluster.startPod(['coordinator', 'judge', 'replanner']);
    ids = [];
    for (let i = 0; i < SESSIONS; i += 1) {
      ids.push((await cluster.client.submit({ instruction: `three tasks ${i}` })).id);
    }
    expect(await reading(planner.query, (v) => v === SESSIONS, `${SESSIONS} plan jobs`)).toBe(
      SESSIONS,
    );
    const text = await scrape();
    expect(sample(text, 'plan', 'prioritized')).toBe(SESSIONS);
    expect(sample(text, 'plan', 'waiting')).toBe(0);
    expect(desiredReplicas(SESSIONS, planner)).toBe(
      Math.min(planner.max, SESSIONS / planner.threshold),
    );

    await cluster.startPod(['planner']);
    expect(await reading(planner.query, (v) => v === 0, 'no plan job left')).toBe(0);
    expect(desiredReplicas(0, planner)).toBe(planner.min);
  });

  it('counts the work jobs no worker has taken, which the client lists as queued, then drains', async () => {
    const worker = scalerOf('worker');
    // Every session's three tasks dispatched, none taken: what `orq status` calls queued.
    const queued = await eventually(
      async () => {
        const views = await Promise.all(ids.map((id) => cluster.client.get(id)));
        const count = views.reduce((n, v) => n + v.queued.length, 0);
        return count === 3 * SESSIONS ? count : undefined;
      },
      'every task queued',
      TIMEOUT,
    );
    expect(await reading(worker.query, (v) => v === queued, `${queued} work jobs`)).toBe(queued);
    const text = await scrape();
    expect(sample(text, 'work', 'prioritized')).toBe(queued);
    expect(sample(text, 'work', 'waiting')).toBe(0);
    // 24 jobs over 4 per pod: KEDA asks for 6 worker pods.
    expect(desiredReplicas(queued, worker)).toBe(Math.ceil(queued / worker.threshold));

    // Under load: a worker drains the queue while the sessions run to the end; every reading on
    // the way is at most the depth the queue started with.
    await cluster.startPod(['worker'], { concurrency: 2 });
    const readings: number[] = [];
    await eventually(
      async () => {
        readings.push(evaluateScalerQuery(worker.query, await scrape()) ?? Number.NaN);
        const views = await Promise.all(ids.map((id) => cluster.client.get(id)));
        return views.every((v) => v.session.state === 'COMPLETED') ? true : undefined;
      },
      'every session completed',
      TIMEOUT,
    );
    expect(readings.every((v) => v >= 0 && v <= queued)).toBe(true);
    expect(await reading(worker.query, (v) => v === 0, 'no work job left')).toBe(0);
    expect(desiredReplicas(0, worker)).toBe(worker.min);
  });
});
