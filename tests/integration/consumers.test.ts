import { describe, expect, it } from 'vitest';
import { clusterPerTest } from '../support/cluster.js';

const startCluster = clusterPerTest();

describe('client.consumers', () => {
  it('counts the processes consuming each role queue under the prefix, 0 where none does', async () => {
    const cluster = await startCluster({ pods: 0 });
    expect(await cluster.client.consumers()).toEqual({
      planner: 0,
      judge: 0,
      worker: 0,
      replanner: 0,
      coordinator: 0,
    });
    await cluster.startPod(['coordinator', 'worker']);
    await cluster.startPod(['worker']);
    expect(await cluster.client.consumers()).toEqual({
      planner: 0,
      judge: 0,
      worker: 2,
      replanner: 0,
      coordinator: 1,
    });
  });
});
