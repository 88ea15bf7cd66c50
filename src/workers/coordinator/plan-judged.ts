import type { PlanBreakdown } from '../../shared/domain/plan.js';
import type {
  Feedback,
  RefinementResult,
  StructureValidation,
} from '../../shared/domain/refinement.js';
import type { Session } from '../../shared/domain/session.js';
import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import type { PlanJudgedEvent } from '../../shared/queues.js';
import {
  advanceRefinementCounters,
  decideBrokenReplan,
  makeRefinementDecision,
} from '../../shared/rules/refinement.js';
import {
  findCycles,
  findDanglingDependencies,
  taskCapProblem,
  validateStructure,
} from '../../shared/rules/structure.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore, planJob } from './context.js';
import { openPlanApproval, type JudgedPlan } from './plan-approval.js';
import { startRunning } from './start-running.js';

/** Problems of a plan on its own: too many tasks, cycles, dangling dependencies, duplicate ids. */
function ownStructureProblems(plan: PlanBreakdown, tooMany: string | undefined): string[] {
  const problems: string[] = [];
  if (tooMany) problems.push(tooMany);
  const seen = new Set<string>();
  const duplicates = plan.tasks.map((t) => t.id).filter((id) => seen.has(id) || !seen.add(id));
  if (duplicates.length > 0)
    problems.push(`duplicate task ids: ${[...new Set(duplicates)].join(', ')}`);
  for (const d of findDanglingDependencies(plan.tasks)) {
    problems.push(`task ${d.taskId} depends on unknown task ${d.dependsOn}`);
  }
  for (const cycle of findCycles(plan.tasks))
    problems.push(`dependency cycle: ${cycle.join(' -> ')}`);
  return problems;
}

/** A replan with more tasks than budget.maxTasks cannot run either: its structure is broken. */
function withinTaskCap(
  structure: StructureValidation,
  tooMany: string | undefined,
): StructureValidation {
  return tooMany
    ? { ...structure, isValid: false, problems: [tooMany, ...structure.problems] }
    : structure;
}

/**
 * Seed 000/003 refinement step: the judged plan is accepted (tasks stored and roots
 * dispatched), sent back to the Planner with the judge's feedback, or rejected.
 */
export async function onPlanJudged(
  ctx: CoordinatorContext,
  event: PlanJudgedEvent,
  eventId: string,
): Promise<Transition> {
  const snapshot = await ctx.store.requireSession(event.sessionId);
  const { session, version } = snapshot;
  if (session.state !== 'PLANNING') {
    return ignore(eventId, `session is ${session.state}, not PLANNING`);
  }
  if (session.planning.attempt !== event.attempt) {
    return ignore(
      eventId,
      `stale plan judgement for attempt ${event.attempt}, now at ${session.planning.attempt}`,
    );
  }

  const config = session.config.refinement;
  const planning = session.planning;
  const history: HistoryEntryDraft[] = [
    { type: 'plan', source: 'planner', attempt: event.attempt, plan: event.plan },
    { type: 'judgement', subject: 'plan', attempt: event.attempt, judgement: event.judgement },
  ];

  let judgement = event.judgement;
  const tooMany = taskCapProblem({
    held: 0,
    added: event.plan.tasks.length,
    maxTasks: session.config.budget.maxTasks,
  });
  const previousPlan = planning.previousPlan;
  // A replan's own problems are validateStructure's: a first plan's are looked for here.
  const ownProblems = previousPlan ? [] : ownStructureProblems(event.plan, tooMany);

  // Seed 000: a replan whose structure is broken is not run; the previous plan is used.
  if (previousPlan) {
    const structure = withinTaskCap(
      validateStructure(previousPlan.tasks, event.plan.tasks, config, session.requiredTerms),
      tooMany,
    );
    history.push({
      type: 'decision',
      decision: structure.isValid ? 'structure:valid' : 'structure:invalid',
      reason: structure.isValid ? 'replan keeps a sound structure' : structure.problems.join('; '),
      inputs: {
        taskCountChange: structure.taskCountChange,
        previousTaskCount: previousPlan.tasks.length,
        taskCount: event.plan.tasks.length,
        hasCircularDependency: structure.hasCircularDependency,
        hasDanglingDependency: structure.hasDanglingDependency,
        termPreservation: structure.termPreservation,
      },
    });
    if (structure.hasTermLoss && structure.isValid) {
      history.push({
        type: 'decision',
        decision: 'terms:warning',
        reason: `required terms missing after replan: ${structure.termPreservation?.missing.join(', ')}`,
        inputs: { termPreservation: structure.termPreservation },
      });
    }
    if (!structure.isValid) {
      return brokenReplan(session, version, event, eventId, history, {
        previousPlan,
        problems: structure.problems,
      });
    }
  } else if (ownProblems.length > 0) {
    // A first plan that is not a DAG cannot run: count it as unacceptable so the loop replans,
    // and say why, or the history would show a plan scored 100 being replanned.
    history.push({
      type: 'decision',
      decision: 'structure:invalid',
      reason: `the plan cannot run as given: ${ownProblems.join('; ')}`,
      inputs: {
        problems: ownProblems,
        score: judgement.score,
        isAcceptable: judgement.isAcceptable,
      },
    });
    judgement = {
      ...judgement,
      isAcceptable: false,
      issues: [...judgement.issues, ...ownProblems],
    };
  }

  const result: RefinementResult = makeRefinementDecision({
    isAcceptable: judgement.isAcceptable,
    score: judgement.score,
    previousScore: planning.previousScore,
    issues: judgement.issues,
    suggestions: judgement.suggestions,
    attemptCount: planning.attemptCount,
    suggestionReplanCount: planning.suggestionReplanCount,
    config,
  });
  history.push(refinementEntry(result, judgement.isAcceptable, judgement));
  // Every way on below starts from the session with this decision recorded.
  const recorded = withDecision(session, result);

  if (result.decision === 'accept') {
    return accept(recorded, version, event.plan, eventId, history, result.reason, '', judgement);
  }
  if (result.decision === 'reject') {
    // orq rule: never throw away an acceptable plan because a later replan got worse.
    if (planning.previousAcceptable && previousPlan) {
      return accept(
        recorded,
        version,
        previousPlan,
        eventId,
        history,
        `${result.reason}; the previous plan was acceptable, so it is used`,
        'refinement:accept-previous',
        previousJudged(planning),
      );
    }
    // (A replan with problems of its own broke the structure and was decided above.)
    return reject(
      recorded,
      version,
      eventId,
      history,
      ownProblems.length > 0
        ? `${result.reason}; the plan cannot run as given: ${ownProblems.join('; ')}`
        : result.reason,
      'PLAN_REJECTED',
    );
  }

  // A plan over budget.maxTasks is no base: a replan that fits would be a task-count change too
  // large to pass the structure check, and the Planner would get it all back to improve on.
  return replan(
    recorded,
    version,
    event.attempt,
    eventId,
    history,
    result,
    tooMany
      ? {
          previousScore: planning.previousScore,
          previousPlan: planning.previousPlan,
          previousAcceptable: planning.previousAcceptable,
        }
      : {
          previousScore: judgement.score,
          previousPlan: event.plan,
          previousAcceptable: judgement.isAcceptable,
        },
  );
}

/** The session with a refinement decision added to its planning's refinementHistory. */
function withDecision(session: Session, result: RefinementResult): Session {
  const { planning } = session;
  return {
    ...session,
    planning: { ...planning, refinementHistory: [...planning.refinementHistory, result] },
  };
}

/** The history entry of a refinement decision, with the feedback it acts on. */
function refinementEntry(
  result: RefinementResult,
  isAcceptable: boolean,
  feedback: Feedback | undefined,
): HistoryEntryDraft {
  return {
    type: 'decision',
    decision: `refinement:${result.decision}`,
    reason: result.reason,
    inputs: {
      reasonCode: result.reasonCode,
      isAcceptable,
      score: result.currentScore,
      previousScore: result.previousScore,
      scoreDirection: result.scoreDirection,
      attemptCount: result.attemptCount,
      suggestionReplanCount: result.suggestionReplanCount,
      issues: feedback?.issues ?? [],
      suggestions: feedback?.suggestions ?? [],
    },
  };
}

/**
 * Back to the Planner for the next attempt, with the decision's feedback; `base` is the plan the
 * next one is compared with (structure) and improves on (score).
 */
function replan(
  session: Session,
  version: number,
  attempt: number,
  eventId: string,
  history: HistoryEntryDraft[],
  result: RefinementResult,
  base: Pick<Session['planning'], 'previousScore' | 'previousPlan' | 'previousAcceptable'>,
): Transition {
  const counters = advanceRefinementCounters(result);
  const nextAttempt = attempt + 1;
  const next: Session = {
    ...session,
    updatedAt: new Date().toISOString(),
    planning: {
      ...session.planning,
      ...base,
      attempt: nextAttempt,
      attemptCount: counters.attemptCount,
      suggestionReplanCount: counters.suggestionReplanCount,
    },
  };
  return {
    changeset: {
      eventId,
      session: { record: next, expectedVersion: version },
      outbox: [planJob(session, nextAttempt, result.feedback)],
      history,
    },
  };
}

/**
 * A replan whose structure broke (decideBrokenReplan): the previous plan is accepted, sent back
 * to the Planner with the problems, or the session fails. The previous plan stays the one to
 * compare the next replan with.
 */
function brokenReplan(
  session: Session,
  version: number,
  event: PlanJudgedEvent,
  eventId: string,
  history: HistoryEntryDraft[],
  { previousPlan, problems }: { previousPlan: PlanBreakdown; problems: readonly string[] },
): Transition {
  const { planning } = session;
  // What the judge asked of the previous plan: the last verdict that was not a broken structure.
  const judged = planning.refinementHistory.findLast((r) => r.reasonCode !== 'structure_broken');
  const result = decideBrokenReplan({
    problems,
    previousAcceptable: planning.previousAcceptable === true,
    previousScore: planning.previousScore,
    score: event.judgement.score,
    previousFeedback: judged?.feedback,
    attemptCount: planning.attemptCount,
    suggestionReplanCount: planning.suggestionReplanCount,
    config: session.config.refinement,
  });
  const recorded = withDecision(session, result);
  if (result.decision === 'accept') {
    return accept(
      recorded,
      version,
      previousPlan,
      eventId,
      history,
      result.reason,
      'refinement:accept-previous',
      previousJudged(planning),
    );
  }
  history.push(refinementEntry(result, event.judgement.isAcceptable, result.feedback));
  if (result.decision === 'reject') {
    return reject(recorded, version, eventId, history, result.reason, 'STRUCTURE_BROKEN');
  }
  return replan(recorded, version, event.attempt, eventId, history, result, {
    // The broken plan is not the one to improve on: the next replan starts from the previous.
    previousScore: planning.previousScore,
    previousPlan,
    previousAcceptable: planning.previousAcceptable,
  });
}

/** What the judge said of the previous plan, when it is the one accepted. */
function previousJudged(planning: Session['planning']): JudgedPlan {
  const judged = planning.refinementHistory.findLast((r) => r.reasonCode !== 'structure_broken');
  return {
    score: planning.previousScore,
    issues: judged?.feedback?.issues ?? [],
    suggestions: judged?.feedback?.suggestions ?? [],
  };
}

/** An accepted plan runs, or first waits for a person's approval (approval.plan, issue 48). */
function accept(
  session: Session,
  version: number,
  plan: PlanBreakdown,
  eventId: string,
  history: HistoryEntryDraft[],
  reason: string,
  decision: string,
  judged: JudgedPlan,
): Transition {
  if (decision) history.push({ type: 'decision', decision, reason, inputs: {} });
  if (session.config.approval.plan === 'required') {
    return openPlanApproval(session, version, plan, eventId, history, reason, judged);
  }
  return startRunning(session, version, plan, eventId, history, reason);
}

function reject(
  session: Session,
  version: number,
  eventId: string,
  history: HistoryEntryDraft[],
  reason: string,
  code: string,
): Transition {
  const next: Session = {
    ...session,
    state: 'FAILED',
    updatedAt: new Date().toISOString(),
    failure: { code, reason },
  };
  return {
    changeset: {
      eventId,
      session: { record: next, expectedVersion: version },
      history: [
        ...history,
        { type: 'state_change', entity: 'session', from: session.state, to: 'FAILED', reason },
      ],
    },
  };
}
