import { describe, expect, it } from 'vitest';
import { nextOutage, UP, type OutageEvent, type OutageState } from '../../src/shared/outage.js';
import { createLogger } from '../../src/shared/logger.js';
import { isTransportError, OutageLog } from '../../src/shared/redis.js';

const REPEAT = 30_000;
const error = (at: number, message = 'connect ECONNREFUSED 127.0.0.1:6379'): OutageEvent => ({
  type: 'error',
  error: message,
  at,
});
const ready = (at: number): OutageEvent => ({ type: 'ready', at });

/** Runs events from `UP`, returning the reports in order (undefined where none). */
function run(events: OutageEvent[]) {
  let state: OutageState = UP;
  return events.map((event) => {
    const step = nextOutage(state, event, REPEAT);
    state = step.state;
    return step.report;
  });
}

describe('nextOutage (what a connection logs of a Redis outage)', () => {
  it('says nothing when a connection is ready without an outage (its first connect)', () => {
    expect(nextOutage(UP, ready(5), REPEAT)).toEqual({ state: UP });
  });

  it('reports the first error, with its message, as the start of an outage', () => {
    expect(nextOutage(UP, error(1_000), REPEAT)).toEqual({
      state: { down: true, since: 1_000, errors: 1, reportedAt: 1_000 },
      report: { kind: 'down', error: 'connect ECONNREFUSED 127.0.0.1:6379' },
    });
  });

  it('counts the failed reconnects that follow without reporting them', () => {
    expect(run([error(0), error(50), error(2_050), error(29_999)])).toEqual([
      { kind: 'down', error: 'connect ECONNREFUSED 127.0.0.1:6379' },
      undefined,
      undefined,
      undefined,
    ]);
  });

  it('reports an outage again every repeat interval while it lasts, with the latest error', () => {
    const reports = run([
      error(0),
      error(10_000),
      error(30_000, 'connect ETIMEDOUT'),
      error(45_000),
      error(59_999),
      error(60_000),
    ]);
    expect(reports).toEqual([
      { kind: 'down', error: 'connect ECONNREFUSED 127.0.0.1:6379' },
      undefined,
      { kind: 'still-down', error: 'connect ETIMEDOUT', errors: 3, downForMs: 30_000 },
      undefined,
      undefined,
      // The interval counts from the last report, not from the start.
      {
        kind: 'still-down',
        error: 'connect ECONNREFUSED 127.0.0.1:6379',
        errors: 6,
        downForMs: 60_000,
      },
    ]);
  });

  it('reports the end of an outage with how long it lasted and how many errors it had', () => {
    expect(run([error(1_000), error(1_500), error(3_000), ready(4_250)])).toEqual([
      { kind: 'down', error: 'connect ECONNREFUSED 127.0.0.1:6379' },
      undefined,
      undefined,
      { kind: 'restored', errors: 3, downForMs: 3_250 },
    ]);
  });

  it('starts afresh after a restore: the next error is a new outage, a second ready is silent', () => {
    expect(run([error(0), ready(100), ready(200), error(300), ready(400)])).toEqual([
      { kind: 'down', error: 'connect ECONNREFUSED 127.0.0.1:6379' },
      { kind: 'restored', errors: 1, downForMs: 100 },
      undefined,
      { kind: 'down', error: 'connect ECONNREFUSED 127.0.0.1:6379' },
      { kind: 'restored', errors: 1, downForMs: 100 },
    ]);
  });
});

describe('OutageLog (the log lines of a connection outage)', () => {
  it('writes one warning when it starts, one per interval, and an info line when it ends', () => {
    const lines: Record<string, unknown>[] = [];
    const raw: string[] = [];
    const logger = createLogger({
      level: 'debug',
      destination: {
        write: (line: string) => {
          raw.push(line);
          lines.push(JSON.parse(line) as Record<string, unknown>);
        },
      },
    });
    let now = 0;
    const log = new OutageLog(logger, 1_000, () => now);
    for (const at of [0, 100, 600, 1_100, 1_500]) {
      now = at;
      log.error(new Error('connect ECONNREFUSED 127.0.0.1:1'));
    }
    now = 1_800;
    log.ready();
    // The report's kind is not written: it would repeat the connection's own `kind` binding.
    expect(raw.join('')).not.toMatch(/"kind":"(down|still-down|restored)"/);
    expect(
      lines.map(({ level, msg, err, errors, downForMs }) => ({
        level,
        msg,
        err,
        errors,
        downForMs,
      })),
    ).toEqual([
      {
        level: 40,
        msg: 'redis unreachable; reconnecting',
        err: 'connect ECONNREFUSED 127.0.0.1:1',
        errors: undefined,
        downForMs: undefined,
      },
      {
        level: 40,
        msg: 'redis still unreachable; reconnecting',
        err: 'connect ECONNREFUSED 127.0.0.1:1',
        errors: 4,
        downForMs: 1_100,
      },
      {
        level: 30,
        msg: 'redis connection restored',
        err: undefined,
        errors: 5,
        downForMs: 1_800,
      },
    ]);
  });
});

describe('isTransportError', () => {
  it.each([
    'connect ECONNREFUSED 127.0.0.1:6379',
    'read ECONNRESET',
    'write EPIPE',
    'connect ETIMEDOUT',
    'getaddrinfo ENOTFOUND redis',
    'getaddrinfo EAI_AGAIN redis',
    'Connection is closed.',
  ])('takes "%s" for Redis being unreachable', (message) => {
    expect(isTransportError(new Error(message))).toBe(true);
  });

  it('does not take a command error or a job error for one', () => {
    expect(isTransportError(new Error('WRONGTYPE Operation against a key'))).toBe(false);
    expect(isTransportError(new Error('Missing lock for job 12. moveToFinished'))).toBe(false);
  });
});
