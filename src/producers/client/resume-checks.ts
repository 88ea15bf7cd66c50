/**
 * What a resume is checked against before it is enqueued: the session's state, its blocked
 * tasks, and for a BUDGET_EXHAUSTED session a budget with room above what it used. A request
 * the coordinator would only record as ignored is refused here, saying why.
 */
import type { z } from 'zod';
import type { OrqConfig } from '../../shared/config/schema.js';
import { RESUMABLE_SESSION_STATES, type Session } from '../../shared/domain/session.js';
import { OrqError } from '../../shared/errors.js';
import { leastReservation } from '../../shared/budget.js';
import { MODEL_ROLES } from '../../shared/config/roles.js';
import type { BudgetRaise } from '../../shared/queues.js';
import { integrationResumable } from '../../shared/rules/integration-plan.js';
import type { SessionStore } from '../../shared/store/session-store.js';
import type { UsageStore } from '../../shared/store/usage-store.js';
import type { ResumeRequest } from './schemas.js';

type ParsedResume = z.output<typeof ResumeRequest>;

/**
 * Refuses a budget above the client's own config (FORBIDDEN): for callers who are not the
 * operator (the HTTP API), who may only lower a budget (issue 41).
 */
export function checkBudgetWithinConfig(config: OrqConfig, budget: BudgetRaise | undefined): void {
  if (!budget) return;
  const ceiling = config.budget;
  const over = (['maxTokens', 'maxUsd'] as const).filter((limit) => {
    const asked = budget[limit];
    const max = ceiling[limit];
    return asked !== undefined && max !== undefined && asked > max;
  });
  if (over.length > 0) {
    throw new OrqError(
      'FORBIDDEN',
      `this API does not let a resume raise ${over.map((limit) => `budget.${limit} above this server's ${ceiling[limit]}`).join(' or ')}`,
      {
        hint: 'Ask the operator: `orq resume` with --max-tokens or --max-usd is not limited.',
        details: { refused: over.map((limit) => `budget.${limit}`) },
      },
    );
  }
}

/** Whether the session can be resumed as `request` asks, by the state it is in. */
export async function checkResumable(
  stores: { store: SessionStore; usageStore: UsageStore },
  session: Session,
  request: ParsedResume,
): Promise<void> {
  const sessionId = session.id;
  if (session.state === 'BUDGET_EXHAUSTED') {
    await checkBudgetRaise(stores.usageStore, session, request.budget);
  } else if (integrationResumable(session)) {
    // Its integration runs again (a budget or task ids have nothing to act on).
    if (request.budget || request.taskIds) {
      throw new OrqError(
        'INVALID_STATE',
        `session ${sessionId} failed in its integration (${session.failure?.code ?? ''}): a resume runs the integration again, with no budget or task ids`,
        { hint: 'Resume without them.', details: { sessionId, state: session.state } },
      );
    }
  } else if (!RESUMABLE_SESSION_STATES.includes(session.state)) {
    throw new OrqError('INVALID_STATE', `session ${sessionId} is ${session.state}`, {
      hint: 'Only BLOCKED (or RUNNING with blocked tasks) and BUDGET_EXHAUSTED sessions, and sessions whose integration failed, can be resumed.',
      details: { sessionId, state: session.state },
    });
  } else if (request.budget) {
    throw new OrqError(
      'INVALID_STATE',
      `session ${sessionId} is ${session.state}: a budget is only given to resume a BUDGET_EXHAUSTED session`,
      { hint: 'Resume without a budget.', details: { sessionId, state: session.state } },
    );
  } else {
    await checkBlockedTasks(stores.store, session, request.taskIds);
  }
}

/** A BUDGET_EXHAUSTED session resumes only with limits above what it has used. */
async function checkBudgetRaise(
  usageStore: UsageStore,
  session: Session,
  budget: BudgetRaise | undefined,
): Promise<void> {
  const refuse = (why: string, hint: string) =>
    new OrqError('INVALID_STATE', `session ${session.id} is BUDGET_EXHAUSTED: ${why}`, {
      hint,
      details: { sessionId: session.id, state: session.state },
    });
  if (!budget) {
    throw refuse(
      'it resumes only with a higher budget',
      `Give a higher limit: orq resume ${session.id} --max-tokens N (or --max-usd X).`,
    );
  }
  const { total } = await usageStore.read(session.id);
  const used = total.inputTokens + total.outputTokens;
  // Each call first reserves at least its output limit: a limit with less room stops again.
  const room = Math.max(...MODEL_ROLES.map((role) => leastReservation(session.config, role)));
  if (budget.maxTokens !== undefined && budget.maxTokens < used + room) {
    throw refuse(
      `maxTokens ${budget.maxTokens} leaves less than one call's reservation (${room}) above the ${used} tokens already used`,
      `Give a maxTokens of at least ${used + room} (orq status shows the usage).`,
    );
  }
  if (budget.maxUsd !== undefined && budget.maxUsd <= total.usd) {
    throw refuse(
      `maxUsd ${budget.maxUsd} is not above the $${total.usd} already spent`,
      'Give a maxUsd above what the session has spent (orq status shows it).',
    );
  }
}

/**
 * A resume of a BLOCKED or RUNNING session acts on its blocked tasks: say so now when it has
 * none, or names a task it does not have or that is not blocked, rather than accept a request
 * the coordinator would only record as ignored.
 */
async function checkBlockedTasks(
  store: SessionStore,
  session: Session,
  taskIds: readonly string[] | undefined,
): Promise<void> {
  const tasks = await store.loadTasks(session.id, session.taskIds);
  const blocked = [...tasks.values()]
    .filter((t) => t.task.state === 'BLOCKED')
    .map((t) => t.task.id);
  const details = { sessionId: session.id, state: session.state };
  if (blocked.length === 0) {
    throw new OrqError('INVALID_STATE', `session ${session.id} has no blocked task to resume`, {
      hint: 'Only blocked tasks are resumed; `orq status <id>` (HTTP: GET /sessions/<id>) shows the state of each task.',
      details,
    });
  }
  const unknown = (taskIds ?? []).filter((id) => !tasks.has(id));
  if (unknown.length > 0) {
    throw new OrqError('NOT_FOUND', `session ${session.id} has no task ${unknown.join(', ')}`, {
      hint: `Its blocked tasks: ${blocked.join(', ')}.`,
      details: { ...details, taskIds: unknown },
    });
  }
  const notBlocked = (taskIds ?? []).filter((id) => tasks.get(id)?.task.state !== 'BLOCKED');
  if (notBlocked.length > 0) {
    const states = notBlocked.map((id) => `${id} is ${tasks.get(id)?.task.state}`).join(', ');
    throw new OrqError('INVALID_STATE', `only blocked tasks can be resumed: ${states}`, {
      hint: `Its blocked tasks: ${blocked.join(', ')}.`,
      details: { ...details, taskIds: notBlocked },
    });
  }
}
