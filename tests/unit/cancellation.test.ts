import { describe, expect, it, vi } from 'vitest';
import type { SessionState } from '../../src/shared/domain/session.js';
import { SessionCancellation } from '../../src/workers/cancellation.js';

/** A state reader answering from a map, counting its reads. */
function states(initial: Record<string, SessionState | undefined | Error>) {
  const map = new Map(Object.entries(initial));
  const reads: string[] = [];
  const read = async (id: string) => {
    reads.push(id);
    const state = map.get(id);
    if (state instanceof Error) throw state;
    return state;
  };
  return { map, reads, read };
}

describe('SessionCancellation', () => {
  it("aborts a session's calls when its end is announced, and only that session's", () => {
    const { read, reads } = states({});
    const cancellation = new SessionCancellation(read, 3_600_000);
    const a = cancellation.watch('a');
    const b = cancellation.watch('b');
    cancellation.ended('a', 'CANCELLED');
    expect(a.signal.aborted).toBe(true);
    expect(a.signal.reason).toMatchObject({
      code: 'LLM_CALL_FAILED',
      message: 'session a is CANCELLED',
    });
    expect(b.signal.aborted).toBe(false);
    expect(reads).toEqual([]);
    a.release();
    b.release();
    expect(cancellation.size).toBe(0);
  });

  it('gives work that starts after an end a signal of its own (a resumed BUDGET_EXHAUSTED session)', async () => {
    const { read, map } = states({ a: 'RUNNING' });
    const cancellation = new SessionCancellation(read, 1);
    // A call the budget stop aborted that has not returned yet still holds its lease.
    const stopped = cancellation.watch('a');
    cancellation.ended('a', 'BUDGET_EXHAUSTED');
    expect(stopped.signal.aborted).toBe(true);
    // Resumed with a higher budget: the next execution must not start aborted.
    const next = cancellation.watch('a');
    expect(next.signal.aborted).toBe(false);
    stopped.release();
    await new Promise((r) => setTimeout(r, 20));
    expect(next.signal.aborted).toBe(false);
    expect(cancellation.size).toBe(1);
    // A polled end is forgotten the same way.
    map.set('a', 'CANCELLED');
    await new Promise((r) => setTimeout(r, 20));
    expect(next.signal.aborted).toBe(true);
    expect(cancellation.size).toBe(0);
    next.release();
    map.set('a', 'RUNNING');
    const after = cancellation.watch('a');
    expect(after.signal.aborted).toBe(false);
    after.release();
  });

  it('ignores an announcement of a state that is not an end, or of a session it does not watch', () => {
    const cancellation = new SessionCancellation(states({}).read, 3_600_000);
    const a = cancellation.watch('a');
    cancellation.ended('a', 'RUNNING');
    cancellation.ended('other', 'FAILED');
    expect(a.signal.aborted).toBe(false);
    expect(cancellation.size).toBe(1);
    a.release();
    cancellation.stop();
  });

  it('keeps the first reason when the end is both announced and polled', async () => {
    const { read, map } = states({ a: 'RUNNING' });
    const cancellation = new SessionCancellation(read, 1);
    const a = cancellation.watch('a');
    cancellation.ended('a', 'BUDGET_EXHAUSTED');
    map.set('a', undefined);
    await new Promise((r) => setTimeout(r, 20));
    expect(a.signal.reason).toMatchObject({ message: 'session a is BUDGET_EXHAUSTED' });
    a.release();
  });

  it('finds a missed end by polling while calls are in flight, through read errors', async () => {
    const { read, map, reads } = states({ a: new Error('Redis away') });
    const cancellation = new SessionCancellation(read, 1);
    const a = cancellation.watch('a');
    await vi.waitFor(() => expect(reads.length).toBeGreaterThanOrEqual(2));
    expect(a.signal.aborted).toBe(false);
    map.set('a', 'RUNNING');
    const seen = reads.length;
    await vi.waitFor(() => expect(reads.length).toBeGreaterThan(seen + 1));
    expect(a.signal.aborted).toBe(false);
    map.set('a', undefined);
    await vi.waitFor(() => expect(a.signal.aborted).toBe(true));
    expect(a.signal.reason).toMatchObject({ message: 'session a is gone' });
    a.release();
  });

  it('stops polling when no call is in flight', async () => {
    const { read, reads } = states({ a: 'RUNNING' });
    const cancellation = new SessionCancellation(read, 1);
    const a = cancellation.watch('a');
    const again = cancellation.watch('a');
    await vi.waitFor(() => expect(reads.length).toBeGreaterThan(0));
    a.release();
    expect(cancellation.size).toBe(1);
    again.release();
    expect(cancellation.size).toBe(0);
    const after = reads.length;
    await new Promise((r) => setTimeout(r, 20));
    // At most the poll that was already running when the last call ended.
    expect(reads.length - after).toBeLessThanOrEqual(1);
  });
});
