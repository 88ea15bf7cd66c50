import { z } from 'zod';
import { Role } from '../shared/queues.js';

/** A role pod's answer on /readyz: ready only with status `ok`. */
export const PodHealth = z.object({
  status: z.enum(['ok', 'starting', 'stopping', 'unavailable']),
  redis: z.enum(['up', 'unreachable']).optional(),
  /** Each role's consumer: running its fetch loop, or stopped. */
  roles: z.partialRecord(Role, z.enum(['running', 'stopped'])).optional(),
});
export type PodHealth = z.infer<typeof PodHealth>;

/** What a pod knows of itself when it is probed. */
export interface PodState {
  phase: 'starting' | 'running' | 'stopping';
  /** Whether Redis answered a PING (not asked while starting or stopping). */
  redisUp?: boolean;
  consumers: readonly { role: Role; running: boolean }[];
}

/**
 * Ready while the pod runs, Redis answers and every consumer runs: a pod that cannot take jobs
 * says why. Liveness is not this: a pod with Redis down reconnects by itself, and restarting it
 * would not help.
 */
export function podHealth(state: PodState): PodHealth {
  if (state.phase !== 'running') return { status: state.phase };
  const roles = Object.fromEntries(
    state.consumers.map(({ role, running }) => [role, running ? 'running' : 'stopped']),
  ) as PodHealth['roles'];
  const redis = state.redisUp ? 'up' : 'unreachable';
  const ready = state.redisUp === true && state.consumers.every((c) => c.running);
  return { status: ready ? 'ok' : 'unavailable', redis, roles };
}
