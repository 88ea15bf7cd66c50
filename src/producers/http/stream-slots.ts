import { OrqError } from '../../shared/errors.js';
import type { Caller } from './auth.js';

/** http.maxStreamsPerCaller's default. */
export const DEFAULT_STREAMS_PER_CALLER = 32;

/** Who a stream counts against: each token, and each tenant's key, apart. */
export function callerKey(caller: Caller): string {
  return caller.role === 'tenant' ? `tenant:${caller.keyId}` : caller.role;
}

/**
 * The event streams each caller holds open on this server (issue 53). Each stream blocks on
 * a Redis connection of its own, so without a cap one caller could drive Redis toward
 * `maxclients`. Counted in this process: a server behind a load balancer caps each replica.
 */
export class StreamSlots {
  private readonly open = new Map<string, number>();

  constructor(readonly perCaller: number) {}

  /** Takes a slot for `caller`, or throws TOO_MANY_REQUESTS (429); returns its release. */
  take(caller: Caller): () => void {
    const key = callerKey(caller);
    const held = this.open.get(key) ?? 0;
    if (held >= this.perCaller) {
      throw new OrqError(
        'TOO_MANY_REQUESTS',
        `this caller already holds ${held} event streams open on this server, its limit`,
        {
          hint: 'Close a stream you no longer read, or poll GET /sessions/:id; the operator raises http.maxStreamsPerCaller.',
          details: { limit: this.perCaller },
        },
      );
    }
    this.open.set(key, held + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.open.get(key) ?? 1) - 1;
      if (left > 0) this.open.set(key, left);
      else this.open.delete(key);
    };
  }

  /** Streams open now, for `caller`. */
  held(caller: Caller): number {
    return this.open.get(callerKey(caller)) ?? 0;
  }
}
