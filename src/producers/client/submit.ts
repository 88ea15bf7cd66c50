/**
 * A submit: stores a new session with its plan job in the outbox, or, for an idempotency key
 * used before, answers with the session the key names (finishing a submit that died midway).
 */
import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { inSpan, SpanKind, withTraceparent } from '../../shared/tracing/trace.js';
import { inBand } from '../../shared/fair-release.js';
import type { SessionConfig } from '../../shared/config/schema.js';
import { Session } from '../../shared/domain/session.js';
import { OrqError, parseOrThrow } from '../../shared/errors.js';
import { flushOutbox } from '../../shared/queue-set.js';
import { jobIds, outboxJob } from '../../shared/queues.js';
import { extractRequiredTerms } from '../../shared/rules/terms.js';
import { submitDigest } from '../submit-digest.js';
import type { ClientContext } from './context.js';
import { SubmitRequest, type SubmitOptions, type SubmitOutcome } from './schemas.js';
import {
  assertOverridesAllowed,
  assertWithinCallerLimits,
  sessionConfig,
} from './session-config.js';

/**
 * Tries of an idempotent submit. A try fails when the session its key names is deleted while it
 * reads it; the next claims the key afresh, and fails again only if yet another session under
 * that key was created and deleted meanwhile.
 */
const SUBMIT_TRIES = 3;

/** One submit request, checked, with the config its session gets. */
interface Submission {
  context: ClientContext;
  request: z.output<typeof SubmitRequest>;
  config: SessionConfig;
}

/** Checks a submit request against the client's config and the caller's limits, and stores it. */
export async function submitSession(
  context: ClientContext,
  request: SubmitRequest,
  options: SubmitOptions,
): Promise<SubmitOutcome> {
  const parsed = parseOrThrow(SubmitRequest, request, 'submit request');
  const effective = sessionConfig(context.config, parsed.config);
  if (options.allowedOverrides) {
    assertOverridesAllowed(parsed.config, options.allowedOverrides);
    assertWithinCallerLimits(
      sessionConfig(context.config, undefined),
      effective,
      options.offeredModels ?? [],
    );
  }
  const submission: Submission = { context, request: parsed, config: effective };
  const key = parsed.idempotencyKey;
  // A try ends without an answer only when its key named a session deleted meanwhile (a
  // fresh id never does), and the next one claims the key for a new session.
  for (let tries = 0; tries < SUBMIT_TRIES; tries += 1) {
    const outcome =
      key === undefined
        ? await createSession(submission, randomUUID())
        : await submitWithKey(submission, key);
    if (outcome) return outcome;
  }
  throw new OrqError(
    'CONFLICT',
    `idempotency key "${key}" named a session deleted during this submit, ${SUBMIT_TRIES} times in a row`,
    {
      hint: "Retry the submit. If it keeps failing, this key's sessions are deleted as soon as they finish (orq delete, orq prune, retention.deleteFinishedAfterSeconds): delete them later, or use a new key.",
      details: { idempotencyKey: key },
    },
  );
}

/** One try: the session the key names, or a new one; undefined if that one was deleted. */
async function submitWithKey(
  submission: Submission,
  key: string,
): Promise<SubmitOutcome | undefined> {
  const { store, queues } = submission.context;
  const sessionId = randomUUID();
  const existing = await store.claimIdempotencyKey(key, sessionId);
  if (!existing) return createSession(submission, sessionId);
  const snapshot = await store.loadSession(existing);
  if (snapshot) {
    assertSameRequest(submission, snapshot.session);
    // The first submit may have died after storing the session, before indexing it
    // or enqueueing its plan job: both are safe to repeat, and the retry finishes it.
    await store.indexSession(snapshot.session);
    await flushOutbox(store, queues, existing);
    return { session: snapshot.session, created: false };
  }
  // The first submit claimed the key but died before storing the session: finish it.
  const outcome = await createSession(submission, existing);
  // Undefined: it had been stored, and was deleted since (its delete not yet done with the
  // key). Free the key as that delete is about to: the next try claims it for a new
  // session, as a submit that came after the delete would.
  if (!outcome) await store.releaseIdempotencyKey(key, existing);
  return outcome;
}

/**
 * A key names one request: the same key with another instruction, config or metadata
 * is a caller's bug, and handing back the old session would hide it. Sessions stored
 * before the digest existed carry none: only their instruction is compared.
 */
function assertSameRequest({ request }: Submission, stored: Session): void {
  const conflict = (what: string, hint: string) =>
    new OrqError(
      'CONFLICT',
      `idempotency key "${request.idempotencyKey}" was used for ${what} (session ${stored.id})`,
      { hint, details: { idempotencyKey: request.idempotencyKey, sessionId: stored.id } },
    );
  if (stored.instruction !== request.instruction) {
    throw conflict(
      'another instruction',
      'Use a new key for a new request; the same key only for a retry of the same one.',
    );
  }
  const digest = stored.requestDigest;
  if (digest !== undefined && digest !== submitDigest(request)) {
    throw conflict(
      'the same instruction with another config or metadata',
      'A retry sends the same request; use a new key to submit it with other settings.',
    );
  }
}

/**
 * Creates session `id` in the span that roots the session's trace: its plan job carries
 * the span's context (tracing/trace.ts), and every later job the context of its cause.
 */
function createSession(submission: Submission, id: string): Promise<SubmitOutcome | undefined> {
  return inSpan(
    'submit_session',
    { kind: SpanKind.PRODUCER, sessionId: id, attributes: { 'orq.session.id': id } },
    () => storeSession(submission, id),
  );
}

/** Stores session `id`; undefined when the id is a deleted session's, which stays deleted. */
async function storeSession(
  submission: Submission,
  id: string,
): Promise<SubmitOutcome | undefined> {
  const { request, config } = submission;
  const { store, queues } = submission.context;
  const now = new Date().toISOString();
  const requiredTerms = extractRequiredTerms(request.instruction, {
    customTerms: config.refinement.customRequiredTerms,
  });
  const session = Session.parse({
    id,
    instruction: request.instruction,
    state: 'PLANNING',
    createdAt: now,
    updatedAt: now,
    requiredTerms,
    config,
    planning: {},
    taskIds: [],
    metadata: request.metadata ?? {},
    ...(request.tenant !== undefined ? { tenant: request.tenant } : {}),
    ...(request.priority !== undefined ? { priority: request.priority } : {}),
    ...(request.idempotencyKey
      ? { idempotencyKey: request.idempotencyKey, requestDigest: submitDigest(request) }
      : {}),
    ...withTraceparent({}),
  });
  // Indexed first: a submit that dies after storing the session leaves it where the
  // outbox sweeper looks (the newest sessions), so its plan job is enqueued anyway.
  await store.indexSession(session);
  const result = await store.apply(id, {
    eventId: `submit|${id}`,
    session: { record: session, expectedVersion: 0 },
    outbox: [
      inBand(session, outboxJob('plan', 'plan', jobIds.plan(id, 0), { sessionId: id, attempt: 0 })),
    ],
    history: [
      { type: 'state_change', entity: 'session', to: 'PLANNING', reason: 'submitted' },
      {
        type: 'decision',
        decision: 'terms:extracted',
        reason: `required terms: ${requiredTerms.terms.join(', ') || '(none)'}`,
        inputs: { requiredTerms },
      },
    ],
  });
  if (result.status === 'GONE') {
    // Indexed above, maybe after the delete dropped the entry: it must not name the id.
    await store.unindexSession(id, session.tenant);
    return undefined;
  }
  if (result.status !== 'OK' && result.status !== 'DUPLICATE') {
    throw new OrqError('CONFLICT', `session ${id} already exists`, {
      details: { sessionId: id },
    });
  }
  await flushOutbox(store, queues, id);
  const stored = (await store.requireSession(id)).session;
  // Two first submits with one key race for one id: the one whose session was stored
  // second finds the other's (DUPLICATE) and must not answer with it unchecked.
  if (request.idempotencyKey) assertSameRequest(submission, stored);
  // DUPLICATE: a concurrent submit with the key stored it first, and answers as its creator.
  return { session: stored, created: result.status === 'OK' };
}
