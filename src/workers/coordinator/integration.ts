import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import {
  INTEGRATION_FENCE_ID,
  SessionIntegration,
  type IntegrationConflict,
  type IntegrationOutcome,
  type IntegrationPhase,
} from '../../shared/domain/integration.js';
import { Task } from '../../shared/domain/task.js';
import type { Session } from '../../shared/domain/session.js';
import { inBand } from '../../shared/fair-release.js';
import {
  jobIds,
  outboxJob,
  type IntegratedEvent,
  type JobFailedEvent,
  type ResumeEvent,
} from '../../shared/queues.js';
import { branchesToMerge, resultBranchName } from '../../shared/rules/integration-plan.js';
import type { Changeset } from '../../shared/store/session-records.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore, recordOnly } from './context.js';
import { fillSlots, TaskEdits } from './task-edits.js';

const stamp = (session: Session): Session => ({ ...session, updatedAt: new Date().toISOString() });

/** Whether a job id is an integration's: its integrate job or the event it hands on. */
export const isIntegrationJob = (jobId: string): boolean =>
  [
    'integrate|',
    'ev-integrated|',
    'judge-result|',
    'ev-result-judged|',
    'publish|',
    'ev-published|',
  ].some((p) => jobId.startsWith(p));

/** The session's integration record moved on to `phase` (the rest kept). */
export const inPhase = (
  session: Session,
  phase: IntegrationPhase,
  changes: Partial<SessionIntegration> = {},
): SessionIntegration => ({
  ...SessionIntegration.parse({ round: 1, ...session.integration }),
  ...changes,
  phase,
});

/** The integrate job of `round` (on the work queue: worker pods have the repository). */
const integrateJob = (session: Session, round: number) =>
  inBand(
    session,
    outboxJob('work', 'integrate', jobIds.integrate(session.id, round), {
      sessionId: session.id,
      round,
    }),
  );

/**
 * An integration sends the session back to work (a conflict's resolution, the final judge's
 * fixes): INTEGRATING → RUNNING with the tasks `edits` added, dispatched as its slots allow,
 * the decision that says why first in the history.
 */
export async function backToWork(
  ctx: CoordinatorContext,
  version: number,
  eventId: string,
  edits: TaskEdits,
  record: Session,
  decision: HistoryEntryDraft & { type: 'decision' },
  history: HistoryEntryDraft[] = [],
): Promise<Changeset> {
  const slots = await fillSlots(ctx.store, edits, record);
  return {
    eventId,
    requireStates: ['INTEGRATING'],
    ...slots,
    session: { record, expectedVersion: version },
    tasks: edits.changes(),
    counters: edits.counterDelta(),
    outbox: edits.outbox,
    history: [
      ...history,
      decision,
      {
        type: 'state_change',
        entity: 'session',
        from: 'INTEGRATING',
        to: 'RUNNING',
        reason: decision.reason,
      },
      ...edits.history,
    ],
  };
}

/**
 * Every task is finished: a session whose tasks committed to git branches goes INTEGRATING
 * instead of COMPLETED, and the integrate job is queued with that change. Undefined for any
 * other session (no command executor, integration off, nothing on a branch): it completes as
 * before, without reading its tasks.
 */
export async function startIntegration(
  ctx: CoordinatorContext,
  session: Session,
  version: number,
  eventId: string,
): Promise<Transition | undefined> {
  const { integration, execution } = session.config;
  if (!integration.enabled || !execution.command) return undefined;
  const tasks = await ctx.store.loadTasksInOrder(session.id, session.taskIds);
  const branches = branchesToMerge(tasks);
  if (branches.length === 0) return undefined;
  const round = session.integration?.round ?? 1;
  const reason = `every task is finished: merging ${branches.length} task branch${branches.length === 1 ? '' : 'es'} into ${resultBranchName(session.id)}`;
  return {
    changeset: {
      eventId,
      requireStates: ['RUNNING'],
      requireCounters: { open: 0 },
      session: {
        record: {
          ...stamp(session),
          state: 'INTEGRATING',
          integration: inPhase(session, 'merging'),
        },
        expectedVersion: version,
      },
      outbox: [integrateJob(session, round)],
      history: [
        {
          type: 'decision',
          decision: 'integration:start',
          reason,
          inputs: {
            round,
            phase: 'merging',
            strategy: integration.strategy,
            order: branches.map((b) => b.taskId),
            branch: resultBranchName(session.id),
          },
        },
        { type: 'state_change', entity: 'session', from: 'RUNNING', to: 'INTEGRATING', reason },
      ],
    },
  };
}

/** What an outcome says in one sentence, for the history and the session's failure. */
export function describeIntegration(outcome: IntegrationOutcome): string {
  const short = (commit: string | undefined) => (commit ?? '').slice(0, 12);
  const stat = outcome.diffStat.split('\n').at(-1)?.trim() || 'no changes';
  switch (outcome.status) {
    case 'merged': {
      const warned = outcome.checks.filter((c) => !c.passed).map((c) => c.name);
      return `merged ${outcome.tasks.length} task(s) into ${outcome.branch} at ${short(outcome.commit)} (${stat})${
        outcome.checks.length > 0
          ? warned.length > 0
            ? `; checks passed but for ${warned.join(', ')} (warn)`
            : '; checks passed'
          : ''
      }${outcome.pullRequest ? `; opened ${outcome.pullRequest.url}` : ''}`;
    }
    case 'checks-failed': {
      const failed = outcome.checks
        .filter((c) => !c.passed && c.mode !== 'warn')
        .map((c) => `${c.name} (${c.mode})`);
      return `merged ${outcome.tasks.length} task(s) into ${outcome.branch} at ${short(outcome.commit)}, but check(s) failed there: ${failed.join(', ')}`;
    }
    case 'conflict': {
      const c = outcome.conflict;
      if (!c) return 'the merge stopped on a conflict';
      const other = c.withTaskId ? ` with ${c.withTaskId} (${c.withTitle ?? ''})` : '';
      return `${c.taskId} (${c.title}) conflicts${other} in ${c.files.join(', ')}; ${outcome.branch} was not written`;
    }
  }
}

/**
 * The integrate job's outcome: merged → COMPLETED; a conflict or a failed blocking check →
 * FAILED with the reason. Applied once, for the round the session waits for, and refused from
 * a delivery a later one superseded (its fence).
 */
export async function onIntegrated(
  ctx: CoordinatorContext,
  event: IntegratedEvent,
  eventId: string,
): Promise<Transition> {
  const { session, version } = await ctx.store.requireSession(event.sessionId);
  if (session.state !== 'INTEGRATING' || session.integration?.round !== event.round) {
    return ignore(
      eventId,
      `session is ${session.state}, not waiting for integration round ${event.round}`,
    );
  }
  const { outcome } = event;
  const resolutions = session.integration?.resolutions ?? 0;
  if (outcome.conflict && resolutions < session.config.integration.maxResolutionRounds) {
    return resolveConflict(ctx, session, version, event, eventId, outcome.conflict);
  }
  // A branch written (merged, or with a failing check): the final judge reviews it next.
  const judging = outcome.status !== 'conflict';
  const reason = judging
    ? `${describeIntegration(outcome)}; the final judge reviews it`
    : describeIntegration(outcome);
  const record: Session = {
    ...stamp(session),
    state: judging ? 'INTEGRATING' : 'FAILED',
    integration: inPhase(session, judging ? 'judging' : 'merging', { outcome }),
    ...(judging ? {} : { failure: { code: 'INTEGRATION_CONFLICT', reason } }),
  };
  const history: HistoryEntryDraft[] = [
    {
      type: 'decision',
      decision: `integration:${outcome.status}`,
      reason,
      inputs: {
        round: event.round,
        phase: record.integration?.phase,
        branch: outcome.branch,
        ...(outcome.commit ? { commit: outcome.commit } : {}),
        baseCommit: outcome.baseCommit,
        strategy: outcome.strategy,
        tasks: outcome.tasks.map((t) => ({ taskId: t.taskId, how: t.how, commit: t.commit })),
        diffStat: outcome.diffStat,
        checks: outcome.checks,
        ...(outcome.resolved.length > 0 ? { resolved: outcome.resolved } : {}),
        ...(outcome.previousCommit ? { previousCommit: outcome.previousCommit } : {}),
        ...(outcome.conflict ? { conflict: outcome.conflict } : {}),
        ...(outcome.pullRequest ? { pullRequest: outcome.pullRequest } : {}),
      },
    },
    ...(judging
      ? []
      : [
          {
            type: 'state_change' as const,
            entity: 'session' as const,
            from: 'INTEGRATING' as const,
            to: 'FAILED' as const,
            reason,
          },
        ]),
  ];
  return {
    changeset: {
      eventId,
      requireStates: ['INTEGRATING'],
      session: { record, expectedVersion: version },
      history,
      ...(judging
        ? {
            outbox: [
              inBand(
                session,
                outboxJob('judge', 'judge-result', jobIds.judgeResult(session.id, event.round), {
                  sessionId: session.id,
                  round: event.round,
                }),
              ),
            ],
          }
        : {}),
      ...(event.fence
        ? { fence: { taskId: INTEGRATION_FENCE_ID, attempt: event.round, value: event.fence } }
        : {}),
    },
  };
}

/**
 * A resume of a session whose integration failed (a conflict, a failing check, what the final
 * judge found missing, or an error): the integration runs again as the next round, from the
 * result branch as it is now (a person may have committed a fix to it), with its resolution and
 * fix rounds counted afresh.
 */
export function resumeIntegration(
  session: Session,
  version: number,
  event: ResumeEvent,
  eventId: string,
  /** A BUDGET_EXHAUSTED session's, stopped in its final judgement: with the raised budget. */
  budgetRaised?: Session,
): Transition {
  const round = (session.integration?.round ?? 0) + 1;
  const reason = `resume: the integration runs again as round ${round}${event.note ? ` (${event.note})` : ''}, after ${session.failure?.code ?? 'a failure'}`;
  const { failure: _failure, ...rest } = stamp(budgetRaised ?? session);
  return {
    changeset: {
      eventId,
      requireStates: [session.state],
      ...(budgetRaised ? { budgetRaised: true } : {}),
      session: {
        record: {
          ...rest,
          state: 'INTEGRATING',
          integration: inPhase(session, 'merging', { round, resolutions: 0, fixes: 0 }),
        },
        expectedVersion: version,
      },
      outbox: [integrateJob(session, round)],
      history: [
        {
          type: 'decision',
          decision: 'resume:integration',
          reason,
          inputs: { round, phase: 'merging', failure: session.failure, requestId: event.requestId },
        },
        {
          type: 'state_change',
          entity: 'session',
          from: session.state,
          to: 'INTEGRATING',
          reason,
        },
      ],
    },
  };
}

/**
 * The integrate job (or its hand-off) failed for good (git could not run, the repository is
 * gone): the session fails with the error instead of waiting for ever.
 */
export function integrationFailed(
  session: Session,
  version: number,
  event: JobFailedEvent,
  eventId: string,
  errorEntry: HistoryEntryDraft,
): Transition {
  if (session.state !== 'INTEGRATING') {
    return recordOnly(
      eventId,
      errorEntry,
      `the integration failed after the session became ${session.state}`,
    );
  }
  const reason = `the integration failed: ${event.error}`;
  return {
    changeset: {
      eventId,
      requireStates: ['INTEGRATING'],
      session: {
        record: {
          ...stamp(session),
          state: 'FAILED',
          failure: { code: 'INTEGRATION_FAILED', reason },
        },
        expectedVersion: version,
      },
      history: [
        errorEntry,
        { type: 'state_change', entity: 'session', from: 'INTEGRATING', to: 'FAILED', reason },
      ],
    },
  };
}

/**
 * A conflict no resolver covers, with resolution rounds left: a task for a worker, carrying the
 * hunks and both tasks' titles and acceptance criteria, depending on both (its branch starts
 * from their work), and judged like any task. The session runs again; once the task is done,
 * the next round merges its branch, which brings in the task that conflicted.
 */
async function resolveConflict(
  ctx: CoordinatorContext,
  session: Session,
  version: number,
  event: IntegratedEvent,
  eventId: string,
  conflict: IntegrationConflict,
): Promise<Transition> {
  const ids = [conflict.withTaskId, conflict.taskId].filter((id): id is string => !!id);
  const both = await ctx.store.loadTasks(session.id, ids);
  const id = `resolve-conflict-${event.round}`;
  const branchOf = (taskId: string) =>
    both.get(taskId)?.task.result?.artifacts.find((a) => a.kind === 'git')?.meta?.branch;
  const describe = (taskId: string) => {
    const task = both.get(taskId)?.task;
    return task
      ? `${task.id} "${task.title}" (branch ${String(branchOf(task.id) ?? '?')}): ${task.acceptance}`
      : taskId;
  };
  const other = conflict.withTaskId ? `${conflict.withTaskId} and ` : '';
  const task = Task.parse({
    id,
    title: `Resolve the conflict between ${other}${conflict.taskId}`,
    acceptance: [
      `The branch holds the work of both tasks, merged, with no conflict left in ${conflict.files.join(', ')}, and each task's acceptance criteria still hold:`,
      ...ids.map((taskId) => `- ${describe(taskId)}`),
    ].join('\n'),
    context: [
      `Merge the branch ${String(branchOf(conflict.taskId) ?? conflict.taskId)} into yours (git merge) and resolve its conflicts, keeping what both tasks did.`,
      'The conflicting hunks:',
      conflict.hunks || '(not recorded)',
    ].join('\n'),
    scopePaths: conflict.files,
    dependencies: ids,
    state: 'READY',
    pendingDependencies: 0,
    criticalPath: 1,
    replanningInfo: { iteration: 0, maxIterations: session.config.replanning.maxIterations },
  });
  const resolutions = (session.integration?.resolutions ?? 0) + 1;
  const reason = `${describeIntegration(event.outcome)}: resolution round ${resolutions} of ${session.config.integration.maxResolutionRounds}, task ${id}`;
  const edits = new TaskEdits(session, []);
  edits.put(task, 'resolves an integration conflict');
  edits.dispatch(id, 'resolves an integration conflict');
  const record: Session = {
    ...stamp(session),
    state: 'RUNNING',
    taskIds: [...session.taskIds, id],
    integration: inPhase(session, 'resolving', {
      round: event.round + 1,
      resolutions,
      outcome: event.outcome,
    }),
  };
  const changeset = await backToWork(ctx, version, eventId, edits, record, {
    type: 'decision',
    decision: 'integration:resolve',
    reason,
    inputs: { round: event.round, phase: 'resolving', conflict, taskId: id },
  });
  return {
    changeset: {
      ...changeset,
      ...(event.fence
        ? { fence: { taskId: INTEGRATION_FENCE_ID, attempt: event.round, value: event.fence } }
        : {}),
    },
  };
}
