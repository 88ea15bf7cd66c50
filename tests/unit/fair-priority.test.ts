import { describe, expect, it } from 'vitest';
import {
  bandPriority,
  CRITICAL_PATH_ROOM,
  criticalPathBoost,
  fairPriority,
  PRIORITY_BAND,
} from '../../src/shared/fair-release.js';

describe('fairPriority', () => {
  it('orders jobs by their lead over V when their paths are alike', () => {
    expect(fairPriority(5, 0, 3)).toBeLessThan(fairPriority(5, 1, 3));
    expect(fairPriority(5, 0)).toBe(fairPriority(5, 0, 1));
  });

  it('puts a job with a longer critical path ahead of shorter ones its session released before', () => {
    // A task on a 50-task chain released after four leaves of its session goes before them.
    expect(fairPriority(5, 4, 50)).toBeLessThan(fairPriority(5, 0, 1));
    // But not ahead of more than the room: a job released far later stays behind.
    expect(fairPriority(5, CRITICAL_PATH_ROOM + 1, 1_000_000)).toBeGreaterThan(
      fairPriority(5, 0, 1),
    );
  });

  it('keeps every work job in its band, behind its plan and judge steps', () => {
    for (const path of [1, 7, 1024, 1_000_000]) {
      for (const lead of [0, 3, PRIORITY_BAND * 2]) {
        const p = fairPriority(7, lead, path);
        expect(p).toBeGreaterThanOrEqual(bandPriority(7));
        expect(p).toBeLessThan(bandPriority(6));
      }
    }
    expect(fairPriority(9, PRIORITY_BAND * 2, 1)).toBeLessThan(fairPriority(8, 0, 1024));
  });
});

describe('criticalPathBoost', () => {
  it('grows with the path on a log scale, from none for a leaf to the whole room', () => {
    expect(criticalPathBoost(1)).toBe(0);
    expect(criticalPathBoost()).toBe(0);
    expect(criticalPathBoost(2)).toBeGreaterThan(0);
    expect(criticalPathBoost(1024)).toBe(CRITICAL_PATH_ROOM);
    expect(criticalPathBoost(100_000)).toBe(CRITICAL_PATH_ROOM);
    // Paths a quarter apart stay apart anywhere on the scale.
    for (const path of [4, 40, 400]) {
      expect(criticalPathBoost(Math.ceil(path * 1.25))).toBeGreaterThan(criticalPathBoost(path));
    }
  });
});
