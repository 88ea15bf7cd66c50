import { afterEach, describe, expect, it } from 'vitest';
import { clusterPerTest } from '../support/cluster.js';
import { bullQueue } from '../support/pods.js';
import { A_THEN_B, deferred, eventually, recordingModels } from '../support/scenarios.js';

const startCluster = clusterPerTest();
const held = deferred();
afterEach(() => held.resolve());

describe('a pod closing past its timeout', () => {
  it('hands back a job whose processor ignores the abort itself, before its connection closes', async () => {
    const cluster = await startCluster({
      roles: ['planner', 'judge', 'replanner', 'coordinator'],
      models: recordingModels(A_THEN_B).models,
    });
    // A model call that ignores the abort: its processor reacts only once the pod has closed.
    const { models } = recordingModels(A_THEN_B, { beforeExecute: () => held.promise });
    const worker = await cluster.startPod(['worker'], { models });
    const work = bullQueue(cluster.client.store.redis, cluster.prefix, 'work');
    try {
      await cluster.client.submit({ instruction: 'x' });
      const running = await eventually(
        async () => (await work.getActive())[0],
        'the work job to be active',
        20_000,
      );
      await worker.close(200);
      const job = await work.getJob(running.id!);
      // Back in its queue for another pod now: not active until its lock lapses, no stall, no
      // attempt spent.
      expect(['waiting', 'prioritized']).toContain(await job!.getState());
      expect(job).toMatchObject({ stalledCounter: 0, attemptsMade: 0 });
      // Another worker runs it to the end.
      held.resolve();
      await cluster.startPod(['worker'], { models: recordingModels(A_THEN_B).models });
      await eventually(
        async () => ((await work.getJob(running.id!))?.finishedOn ? true : undefined),
        'the job to finish on the other worker',
        20_000,
      );
    } finally {
      await work.close();
    }
  }, 60_000);
});
