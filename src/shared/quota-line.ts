import { CRITICAL_PATH_ROOM, criticalPathBoost } from './critical-path-boost.js';

export { tenantWeight } from './tenant-weight.js';

/**
 * The fair line of a provider limit (issue 46, docs/quotas.md#the-line): the order in which calls
 * that wait for the same limit are granted. A call's place is one number, its rank, lowest
 * first, built from what fair release orders jobs by:
 *
 * 1. its session's priority band (9 first);
 * 2. plan, plan-judgement and replan steps before task work (executions and their judgements);
 * 3. a start-time fair queuing (SFQ) tag the line itself gives the call when it first waits:
 *    max(the line's V, its session's last finish tag), each call costing its session the number
 *    of its tenant's sessions at the line over the tenant's weight. So tenants share the limit
 *    by weight and a tenant's sessions share its part equally. The line's V is the tag of the
 *    last call it granted: a session that arrives late with few calls (SPARSE_CALLS) starts
 *    SESSION_CREDIT behind V, ahead of the backlog's next calls, not behind them (and finds
 *    RESERVED_REQUESTS kept for it);
 * 4. the critical path: a task on a longer chain goes up to PATH_CALLS of its session's calls
 *    ahead.
 *
 * Not the job's own SFQ tag: under a binding quota a job is taken, waits, is handed back, and
 * the next is taken, so the queue's V races through the whole backlog, and a session submitted
 * then would be tagged behind every call of it. The line's V moves only when a call is granted.
 *
 * Redis scores are doubles: the class (1 and 2) takes the high part, the tag the low part.
 */

/** Score room of one class (band and step): tags stay far below it (2^44, ulp 1/16 at the top). */
export const CLASS_SPAN = 2 ** 44;
/** A band's two classes: steps, then task work. */
const CLASSES_PER_BAND = 2;
/** Session priorities run from 1 to 9, 9 first. */
const HIGHEST_PRIORITY = 9;

/**
 * How far, in tag units, behind V a sparse session new to the line starts (or one that has not
 * asked for a minute): its first calls go ahead of the backlog of sessions that have had their
 * share, as FQ-CoDel serves a new flow's first quantum before the old flows (RFC 8290, the sparse
 * flow optimisation). Tag units are calls of a one-session tenant: a tenant's sessions split it
 * as they split its share. Bounded: a session has it once; while it keeps asking it starts at V
 * at the lowest, so it cannot win the credit back by pausing, and its share over time is
 * unchanged.
 */
export const SESSION_CREDIT = 20;

/**
 * A session is sparse, and its calls spend its credit, only while fewer than this many of its
 * calls wait in the line: one found with this many waiting has a backlog, and its credit is gone
 * for good (FQ-CoDel: a flow that builds a queue uses up its quantum and moves to the old flows;
 * RFC 8290 section 4). So a 100-task session, whose calls join by the dozen, is served level
 * with V after its first few, and a 4-task session arriving behind it goes first. As many as the
 * requests kept in reserve: a sparse session's calls that wait at once find them there.
 */
export const SPARSE_CALLS = 4;

/**
 * Requests a line keeps in its bucket for calls that spend their session's credit (their tag is
 * below V) and for steps: a session that arrives while a backlog binds finds them there, as it
 * would find the bucket if it were alone, instead of waiting for the refill a call at a time.
 * At most a quarter of the bucket. They cost the backlog these few requests once per busy spell,
 * not its rate: the bucket refills at the same pace, it only stops this far above empty.
 */
export const RESERVED_REQUESTS = 4;

/** What the line orders a call by; the Lua script adds the tag. */
export interface LineCall {
  /** The session's priority, 1 to 9 (5 unless set). */
  priority: number;
  /** A plan, plan judgement or replan call: ahead of task work in its band. */
  step: boolean;
  /** Tasks on the longest chain through the call's task (itself included); 1 or none: a leaf. */
  criticalPath?: number | undefined;
}

/** The high part of a call's rank: its band, then steps before task work (0 = first). */
export function lineClass(call: Pick<LineCall, 'priority' | 'step'>): number {
  const band =
    HIGHEST_PRIORITY - Math.min(HIGHEST_PRIORITY, Math.max(1, Math.round(call.priority)));
  return band * CLASSES_PER_BAND + (call.step ? 0 : 1);
}

/**
 * How many of its session's calls a task on a long chain may go ahead of. Few, unlike fair
 * release's room of 256 jobs: a call's tag step is one call of the limit, so a larger room
 * would let one session's long-path calls take a burst of the limit from the others.
 */
export const PATH_CALLS = 4;

/**
 * How many of its session's calls a call goes ahead of, for its task's critical path: none for
 * a leaf, PATH_CALLS for the longest paths (criticalPathBoost's log scale).
 */
export function pathLead(criticalPath?: number): number {
  return (PATH_CALLS * criticalPathBoost(criticalPath)) / CRITICAL_PATH_ROOM;
}

/** One call waiting in a line, as the store reads it back. */
export interface LineEntry {
  callId: string;
  sessionId: string;
  tenant: string;
  /** When it first waited (ms, Redis clock). */
  since: number;
}

/** A tenant's calls in one line: how many wait, since when, and per session. */
export interface TenantLine {
  tenant: string;
  waiting: number;
  /** The longest wait of its calls now (ms). */
  oldestWaitMs: number;
  sessions: SessionLine[];
}

export interface SessionLine {
  sessionId: string;
  waiting: number;
  /** The place of its first call in the whole line (1 = next). */
  place: number;
}

/**
 * The line by tenant and session, from its entries in order (first = next). Tenants and
 * sessions come in the order of their first call.
 */
export function summarizeLine(entries: readonly LineEntry[], now: number): TenantLine[] {
  const tenants = new Map<string, TenantLine & { bySession: Map<string, SessionLine> }>();
  entries.forEach((entry, index) => {
    let tenant = tenants.get(entry.tenant);
    if (!tenant) {
      tenant = {
        tenant: entry.tenant,
        waiting: 0,
        oldestWaitMs: 0,
        sessions: [],
        bySession: new Map(),
      };
      tenants.set(entry.tenant, tenant);
    }
    tenant.waiting += 1;
    tenant.oldestWaitMs = Math.max(tenant.oldestWaitMs, Math.max(0, now - entry.since));
    let session = tenant.bySession.get(entry.sessionId);
    if (!session) {
      session = { sessionId: entry.sessionId, waiting: 0, place: index + 1 };
      tenant.bySession.set(entry.sessionId, session);
      tenant.sessions.push(session);
    }
    session.waiting += 1;
  });
  return [...tenants.values()].map(({ bySession: _, ...tenant }) => tenant);
}

/** A call of no job (a test, a script): its own session, the default tenant, task work. */
export const ANONYMOUS_CALLER = {
  sessionId: '',
  tenant: 'default',
  lineClass: lineClass({ priority: 5, step: false }),
  pathLead: 0,
  weight: 1,
} as const;
