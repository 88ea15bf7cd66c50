/**
 * Following a session as it moves: its history as it is written (watch), until it settles
 * (wait), and whether a resume or cancel the coordinator has not applied yet is about to move
 * it on, so that neither ends at the state from before that request.
 */
import { z } from 'zod';
import type { HistoryEntry } from '../../shared/domain/history.js';
import { REQUEST_SETTLED_STATES, SessionId, type Session } from '../../shared/domain/session.js';
import { OrqError, parseOrThrow } from '../../shared/errors.js';
import { isResumeEvent, Role, ROLE_QUEUE } from '../../shared/queues.js';
import {
  asRedisUnavailable,
  blockingTwin,
  isTransportError,
  untilReady,
  type RedisConnection,
} from '../../shared/redis.js';
import { watchEnds, type WatchUntil } from '../../shared/rules/watch-end.js';
import { dropPendingRequests, readSettling } from '../../shared/store/pending-resumes.js';
import { sessionNotFound } from '../../shared/store/session-reads.js';
import type { StoredHistoryEntry } from '../../shared/store/session-records.js';
import type { ClientContext } from './context.js';
import type { SessionReader } from './reading.js';
import { StreamId, WaitOptions, type SessionView, type WatchOptions } from './schemas.js';

/** BullMQ job states from which a job no longer runs ('unknown': removed, or never added). */
const ENDED_JOB_STATES: readonly string[] = ['completed', 'failed', 'unknown'];

export class SessionWatcher {
  constructor(
    private readonly context: ClientContext,
    private readonly reader: SessionReader,
  ) {}

  async *watch(sessionId: string, options: WatchOptions = {}): AsyncGenerator<StoredHistoryEntry> {
    const { redis, store, blockingConnections, addressSetting } = this.context;
    const until = options.until ?? 'finished';
    const blockMs = options.blockMs ?? 1_000;
    const listening = new AbortController(); // ends the waits below with the watch
    const reader = openBlockingReader(redis, options.onConnection, listening.signal);
    blockingConnections.add(reader);
    const tail = new HistoryTail(options.after ?? '0-0');
    const key = store.keys(sessionId).history;
    // The reader waits through a Redis outage (its reads queue until Redis is back), and
    // ioredis does not fail a queued read when the reader is closed meanwhile: an abort must
    // not wait for the read, only for whichever comes first.
    const { signal } = options;
    const aborted = new Promise<'aborted'>((resolve) => {
      signal?.addEventListener('abort', () => resolve('aborted'), {
        once: true,
        signal: listening.signal,
      });
    });
    try {
      parseOrThrow(SessionId, sessionId, 'session id');
      // Redis would refuse a malformed cursor with a bare ReplyError on the first read.
      parseOrThrow(z.object({ after: StreamId.optional() }), options, 'watch options');
      await store.requireSession(sessionId);
      for (;;) {
        if (signal?.aborted) return;
        const reply = await Promise.race([
          reader.xread('COUNT', 500, 'BLOCK', blockMs, 'STREAMS', key, tail.cursor),
          aborted,
        ]);
        if (reply === 'aborted') return;
        tail.sessionMoved = false;
        yield* tail.entriesOf(reply);
        // More may come, unless the session just moved where the watch ends: asked at once, not
        // after another blockMs without entries (which every watch and wait would sit out).
        if (reply && reply.length > 0 && !tail.sessionMoved) continue;
        // Nothing new, or the session moved: stop once it has settled and every entry was read.
        const over = await this.settledThroughDrops(sessionId, until, signal);
        if (over === 'aborted') return;
        if (over) {
          // The write that settled it may have come after the read above, with its entries
          // (the state change to COMPLETED): read on to the end once more, without waiting.
          for (;;) {
            const rest = await reader.xread('COUNT', 500, 'STREAMS', key, tail.cursor);
            if (!rest || rest.length === 0) return;
            yield* tail.entriesOf(rest);
          }
        }
      }
    } catch (error) {
      // A watcher learns that Redis went away as REDIS_UNAVAILABLE, like every other call.
      throw asRedisUnavailable(error, addressSetting, redis);
    } finally {
      listening.abort();
      blockingConnections.delete(reader);
      reader.disconnect();
    }
  }

  async wait(sessionId: string, options: WaitOptions = {}): Promise<SessionView> {
    const { timeoutMs, until = 'settled' } = parseOrThrow(WaitOptions, options, 'wait options');
    const controller = new AbortController();
    const timer = timeoutMs ? setTimeout(() => controller.abort(), timeoutMs) : undefined;
    try {
      for await (const _ of this.watch(sessionId, {
        until,
        signal: controller.signal,
        blockMs: 500,
      })) {
        // Draining the stream until the session settles.
      }
    } finally {
      if (timer) clearTimeout(timer);
    }
    // The time may run out just as the session gets where the wait was going (BLOCKED, until
    // settled): the watch's own rule says whether it did, not the timer.
    const over = !controller.signal.aborted || (await this.watchIsOver(sessionId, until));
    const view = await this.reader.get(sessionId);
    if (!over) throw await this.waitTimedOut(view.session, timeoutMs ?? 0);
    return view;
  }

  resumePending(sessionId: string): Promise<boolean> {
    return this.pendingWhere(sessionId, isResumeEvent);
  }

  requestPending(sessionId: string): Promise<boolean> {
    return this.pendingWhere(sessionId, () => true);
  }

  /** Whether a request of the session that `counts` counts waits for the coordinator. */
  private pendingWhere(sessionId: string, counts: (eventId: string) => boolean): Promise<boolean> {
    return this.context.guard(async () => {
      parseOrThrow(SessionId, sessionId, 'session id');
      const { state, pendingRequests } = await readSettling(this.context.store, sessionId);
      // As every call about one session: a wrong id is not a session with nothing pending.
      if (state === undefined) throw sessionNotFound(sessionId);
      // A request queued before a cancel or a completion is ignored when it is applied.
      if (!REQUEST_SETTLED_STATES.includes(state)) return false;
      const counted = pendingRequests.filter(counts);
      return counted.length > 0 && (await this.stillQueued(sessionId, counted)).length > 0;
    });
  }

  /**
   * Whether a watch of the session ends now (watchEnds). A resume recorded as pending counts
   * only while its job may still run: one whose job failed for good or was removed will never
   * be applied, and must not hold every watch of the session open for ever.
   */
  private async watchIsOver(sessionId: string, until: WatchUntil): Promise<boolean> {
    const { store } = this.context;
    const first = await readSettling(store, sessionId);
    // Running, or planning: no resume to look at.
    if (!watchEnds(first.state, until, false)) return false;
    // No resume, or a state no resume moves on from (one queued before a cancel is ignored).
    if (first.pendingRequests.length === 0 || watchEnds(first.state, until, true)) return true;
    if ((await this.stillQueued(sessionId, first.pendingRequests)).length > 0) return false;
    // Those jobs ended without applying their resume. Read again: a resume applied between the
    // first read and the job's end has moved the session on.
    const stale = new Set(first.pendingRequests);
    const again = await readSettling(store, sessionId);
    return watchEnds(
      again.state,
      until,
      again.pendingRequests.some((id) => !stale.has(id)),
    );
  }

  /**
   * watchIsOver through the client's own connection, which fails fast while it reconnects
   * (after an outage, or dropped alone) and rejects a read it cut off: waited for and asked
   * again, as the reader waits through an outage. A client closed meanwhile fails the watch.
   */
  private async settledThroughDrops(
    sessionId: string,
    until: WatchUntil,
    signal: AbortSignal | undefined,
  ): Promise<boolean | 'aborted'> {
    const { redis } = this.context;
    for (;;) {
      if (!(await untilReady(redis, signal))) return 'aborted';
      try {
        return await this.watchIsOver(sessionId, until);
      } catch (error) {
        if (!isTransportError(error) || redis.status === 'ready' || redis.status === 'end') {
          throw error;
        }
      }
    }
  }

  /**
   * Those of the session's pending `eventIds` whose coordinator job may still run (waiting,
   * delayed, active...). The records of the others are dropped: their jobs ended (failed for
   * good, removed, or completed without applying), so their resumes never will be applied, and
   * each idle poll of a watch would look them up again until the session is deleted.
   */
  private async stillQueued(sessionId: string, eventIds: readonly string[]): Promise<string[]> {
    const coordinator = this.context.queues.get(ROLE_QUEUE.coordinator);
    const states = await Promise.all(eventIds.map((id) => coordinator.getJobState(id)));
    const ended = (_: string, i: number) => ENDED_JOB_STATES.includes(states[i] ?? 'unknown');
    await dropPendingRequests(this.context.store, sessionId, eventIds.filter(ended));
    return eventIds.filter((id, i) => !ended(id, i));
  }

  /**
   * A wait that ran out of time: TIMEOUT, not INVALID_STATE (nothing is wrong with the session),
   * with whether its roles run here, the usual reason a session does not move.
   */
  private async waitTimedOut(session: Session, timeoutMs: number): Promise<OrqError> {
    const counts = await this.reader.consumers().catch(() => ({}) as Partial<Record<Role, number>>);
    const missing = Role.options.filter((role) => counts[role] === 0);
    const where = `on this Redis under prefix "${this.context.prefix}"`;
    const hint =
      Object.keys(counts).length === 0
        ? `Check that roles run ${where} (client.consumers() counts them), or wait longer (a higher timeoutMs).`
        : missing.length === Role.options.length
          ? `No roles run ${where} (client.consumers() counts none): start them (orq start, or startRoles) with the same Redis and prefix.`
          : missing.length > 0
            ? `No process runs the ${missing.join(', ')} role${missing.length > 1 ? 's' : ''} ${where} (client.consumers()): start ${missing.length > 1 ? 'them' : 'it'} with the same Redis and prefix.`
            : 'Its roles run: wait longer (a higher timeoutMs), or check the pods and their logs.';
    return new OrqError(
      'TIMEOUT',
      `wait for session ${session.id} timed out after ${timeoutMs} ms: it is still ${session.state}`,
      {
        hint,
        details: { sessionId: session.id, state: session.state, timeoutMs, consumers: counts },
      },
    );
  }
}

/**
 * A watch's own connection, for its blocking reads. Tells `onConnection` when it is lost, and
 * when it is back, which is only once the client's own connection is too: that reconnects on a
 * schedule of its own, up to 2 s after the reader, and the watch (and a get after it) reads
 * through it.
 */
function openBlockingReader(
  redis: RedisConnection,
  onConnection: WatchOptions['onConnection'],
  listening: AbortSignal,
): RedisConnection {
  const reader = blockingTwin(redis);
  let down = false;
  reader.on('error', (error: Error) => {
    if (down) return;
    down = true;
    onConnection?.({ up: false, error: error.message });
  });
  reader.on('ready', () => {
    if (!down) return;
    untilReady(redis, listening)
      .then((ready) => {
        if (!ready || !down || reader.status !== 'ready') return;
        down = false;
        onConnection?.({ up: true });
      })
      .catch(() => undefined); // a client closed meanwhile: the watch ends with it
  });
  return reader;
}

/** Where a watch is in the session's history, and whether the session changed state since. */
class HistoryTail {
  /** Set by entriesOf when the session itself changed state: the watch may be over. */
  sessionMoved = false;

  constructor(public cursor: string) {}

  /** The entries of one XREAD reply, moving the cursor past each. */
  *entriesOf(reply: [string, [string, string[]][]][] | null): Generator<StoredHistoryEntry> {
    for (const [, entries] of reply ?? []) {
      for (const [id, fields] of entries) {
        this.cursor = id;
        const index = fields.indexOf('e');
        const entry = JSON.parse(fields[index + 1] ?? '{}') as HistoryEntry;
        if (entry.type === 'state_change' && entry.entity === 'session') this.sessionMoved = true;
        yield { id, entry };
      }
    }
  }
}
