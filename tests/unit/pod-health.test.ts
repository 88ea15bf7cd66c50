import { describe, expect, it } from 'vitest';
import { PodHealth, podHealth, type PodState } from '../../src/workers/pod-health.js';

const both = [
  { role: 'worker', running: true },
  { role: 'judge', running: true },
] as const;

function health(state: PodState): PodHealth {
  // Every answer is a valid probe payload.
  return PodHealth.parse(podHealth(state));
}

describe('podHealth (what a role pod answers on /readyz)', () => {
  it('is ready only while running with Redis up and every consumer running', () => {
    expect(health({ phase: 'running', redisUp: true, consumers: both })).toEqual({
      status: 'ok',
      redis: 'up',
      roles: { worker: 'running', judge: 'running' },
    });
  });

  it('says starting or stopping outside the running phase, whatever else holds', () => {
    for (const phase of ['starting', 'stopping'] as const) {
      expect(health({ phase, redisUp: true, consumers: both })).toEqual({ status: phase });
    }
  });

  it('is unavailable with Redis down, or with a consumer stopped, and says which', () => {
    expect(health({ phase: 'running', redisUp: false, consumers: both })).toEqual({
      status: 'unavailable',
      redis: 'unreachable',
      roles: { worker: 'running', judge: 'running' },
    });
    const stopped = [both[0], { role: 'judge', running: false }] as const;
    expect(health({ phase: 'running', redisUp: true, consumers: stopped })).toEqual({
      status: 'unavailable',
      redis: 'up',
      roles: { worker: 'running', judge: 'stopped' },
    });
    // An unanswered PING counts as down.
    expect(health({ phase: 'running', consumers: both }).status).toBe('unavailable');
  });
});
