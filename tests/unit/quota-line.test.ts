import type { Job } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { bandPriority, fairPriority } from '../../src/shared/fair-release.js';
import {
  CLASS_SPAN,
  lineClass,
  PATH_CALLS,
  pathLead,
  summarizeLine,
  tenantWeight,
} from '../../src/shared/quota-line.js';
import { laneIds, takeLane, type QuotaCaller } from '../../src/workers/llm/quota-caller.js';
import { quotaCallerOf, waitedForQuota } from '../../src/workers/quota-line-jobs.js';

describe('lineClass', () => {
  it('orders by priority band first, then plan steps before task work', () => {
    const rank = (priority: number, step: boolean) => lineClass({ priority, step });
    expect(rank(9, false)).toBeLessThan(rank(8, true));
    expect(rank(5, true)).toBeLessThan(rank(5, false));
    expect(rank(5, false)).toBeLessThan(rank(4, true));
    // Every class times the span stays an exact double: 18 classes under 2^53.
    expect(rank(1, false) * CLASS_SPAN + CLASS_SPAN).toBeLessThan(Number.MAX_SAFE_INTEGER);
  });

  it('keeps a priority out of range inside the bands', () => {
    expect(lineClass({ priority: 42, step: true })).toBe(lineClass({ priority: 9, step: true }));
    expect(lineClass({ priority: 0, step: false })).toBe(lineClass({ priority: 1, step: false }));
  });
});

describe('pathLead', () => {
  it('gives a leaf no lead and the longest paths a few calls of their session at most', () => {
    expect(pathLead()).toBe(0);
    expect(pathLead(1)).toBe(0);
    expect(pathLead(2)).toBeGreaterThan(0);
    expect(pathLead(64)).toBeLessThan(pathLead(128));
    expect(pathLead(1_000_000)).toBe(PATH_CALLS);
  });
});

describe('tenantWeight', () => {
  it('is the configured weight, or 1', () => {
    expect(tenantWeight({ acme: 3 }, 'acme')).toBe(3);
    expect(tenantWeight({ acme: 3 }, 'other')).toBe(1);
    expect(tenantWeight({ bad: 0 }, 'bad')).toBe(1);
    expect(tenantWeight({}, 'constructor')).toBe(1);
  });
});

describe('summarizeLine', () => {
  it('counts each tenant and session, with the oldest wait and each session’s first place', () => {
    const entry = (callId: string, sessionId: string, tenant: string, since: number) => ({
      callId,
      sessionId,
      tenant,
      since,
    });
    const line = summarizeLine(
      [
        entry('j1|0', 's1', 'A', 900),
        entry('j2|0', 's2', 'B', 990),
        entry('j3|0', 's1', 'A', 500),
        entry('j4|0', 's3', 'A', 999),
      ],
      1_000,
    );
    expect(line).toEqual([
      {
        tenant: 'A',
        waiting: 3,
        oldestWaitMs: 500,
        sessions: [
          { sessionId: 's1', waiting: 2, place: 1 },
          { sessionId: 's3', waiting: 1, place: 4 },
        ],
      },
      {
        tenant: 'B',
        waiting: 1,
        oldestWaitMs: 10,
        sessions: [{ sessionId: 's2', waiting: 1, place: 2 }],
      },
    ]);
  });
});

describe('a job at the line', () => {
  const job = (name: string, data: object, priority?: number) =>
    ({
      id: 'job-1',
      name,
      data,
      opts: priority ? { priority } : {},
      progress: 0,
    }) as unknown as Job;

  it('is a step for plan, plan judgement and replan jobs, task work for the rest', () => {
    expect(quotaCallerOf('planner', job('plan', {})).step).toBe(true);
    expect(quotaCallerOf('replanner', job('replan', {})).step).toBe(true);
    expect(quotaCallerOf('judge', job('judge-plan', {})).step).toBe(true);
    expect(quotaCallerOf('judge', job('judge-task', {})).step).toBe(false);
    expect(quotaCallerOf('worker', job('execute', {})).step).toBe(false);
  });

  it("takes its session's priority from its BullMQ number, its tenant and path from its data", () => {
    const caller = quotaCallerOf(
      'worker',
      job('execute', { sessionId: 's', tenant: 'acme', criticalPath: 7 }, fairPriority(7, 120, 7)),
    );
    expect(caller).toMatchObject({ sessionId: 's', tenant: 'acme', priority: 7, criticalPath: 7 });
    expect(quotaCallerOf('planner', job('plan', {}, bandPriority(2))).priority).toBe(2);
    expect(quotaCallerOf('planner', job('plan', {})).priority).toBeUndefined();
  });

  it('knows a job handed back to wait for quota by its progress', () => {
    const waiting = {
      ...job('plan', {}),
      progress: { activity: 'waiting for quota (x), place 3' },
    };
    expect(waitedForQuota(waiting as unknown as Job)).toBe(true);
    expect(waitedForQuota(job('plan', {}))).toBe(false);
  });

  it("gives side-by-side calls their own lanes and a job's next call the lane freed", () => {
    const caller: QuotaCaller = {
      jobId: 'j',
      sessionId: 's',
      step: false,
      lanes: new Set(),
      joined: new Set(),
    };
    const first = takeLane(caller);
    const second = takeLane(caller);
    expect([first.callId, second.callId]).toEqual(['j|0', 'j|1']);
    first.release();
    expect(takeLane(caller).callId).toBe('j|0');
    expect(laneIds('j')).toContain('j|1');
  });
});
