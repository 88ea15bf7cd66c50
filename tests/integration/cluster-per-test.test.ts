import { describe, expect, it } from 'vitest';
import { clusterPerTest, type TestCluster } from '../support/cluster.js';

// The helper most integration files rely on to stop their roles: a cluster a test started is
// closed once that test ends, and only then.
const startCluster = clusterPerTest();
let first: TestCluster | undefined;

describe('clusterPerTest', () => {
  it('hands out a running cluster', async () => {
    first = await startCluster({ pods: 1 });
    expect(first.pods[0]?.workers.every((w) => w.isRunning())).toBe(true);
  });

  it('has closed the cluster of the test before', () => {
    expect(first?.pods[0]?.workers.some((w) => w.isRunning())).toBe(false);
  });
});
