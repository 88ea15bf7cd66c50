import type { HistoryEntryDraft } from '../../shared/domain/history.js';
import type {
  IntegrationOutcome,
  IntegrationPhase,
  SessionIntegration,
} from '../../shared/domain/integration.js';
import type { Session } from '../../shared/domain/session.js';
import { inBand } from '../../shared/fair-release.js';
import {
  jobIds,
  outboxJob,
  type PublishedEvent,
  type ResultJudgedEvent,
} from '../../shared/queues.js';
import { blockingFailures, finalVerdict, fixTask } from '../../shared/rules/final-judgement.js';
import type { CoordinatorContext, Transition } from './context.js';
import { ignore } from './context.js';
import { backToWork, inPhase } from './integration.js';
import { TaskEdits } from './task-edits.js';

const stamp = (session: Session): Session => ({ ...session, updatedAt: new Date().toISOString() });

/**
 * The integration and its merge outcome when the session waits on `phase` of `round`, else
 * undefined: an event for another round or phase is stale (a redelivery, or overtaken).
 */
function awaitedRound(
  session: Session,
  round: number,
  phase: IntegrationPhase,
): { integration: SessionIntegration; outcome: IntegrationOutcome } | undefined {
  const integration = session.integration;
  if (session.state !== 'INTEGRATING' || integration?.round !== round) return undefined;
  if (integration.phase !== phase || !integration.outcome) return undefined;
  return { integration, outcome: integration.outcome };
}

/** Where the session stands, for an ignored event's reason. */
const stands = (session: Session): string =>
  `session is ${session.state} (${session.integration?.phase ?? 'no integration'})`;

/**
 * The final judge's verdict on a round's result branch (issue 47, item 3). Done (and no
 * blocking check failing) → COMPLETED. Something missing, with rounds left
 * (integration.maxRounds) → a task holding what is missing goes to the Replanner, whose
 * subtasks (held to the required terms, task-replanned.ts) run from the result branch; once
 * they are finished the next round merges them and moves the branch. No rounds left → FAILED
 * with what is missing. Applied once, for the round the session waits on.
 */
export async function onResultJudged(
  ctx: CoordinatorContext,
  event: ResultJudgedEvent,
  eventId: string,
): Promise<Transition> {
  const { session, version } = await ctx.store.requireSession(event.sessionId);
  const awaited = awaitedRound(session, event.round, 'judging');
  if (!awaited) {
    return ignore(
      eventId,
      `${stands(session)}, not waiting for the final judgement of round ${event.round}`,
    );
  }
  const { integration, outcome } = awaited;
  const verdict = finalVerdict(event.judgement, outcome, event.round);
  const { maxRounds } = session.config.integration;
  const fixes = integration.fixes;
  const judged: HistoryEntryDraft = {
    type: 'decision',
    decision: verdict.done ? 'integration:done' : 'integration:missing',
    reason: verdict.done
      ? `the final judge found ${outcome.branch} done: ${verdict.reason}`
      : `the final judge found ${outcome.branch} wanting: ${verdict.reason}`,
    inputs: {
      round: event.round,
      phase: 'judging',
      commit: outcome.commit,
      requiredTerms: session.requiredTerms.terms,
      diffStat: outcome.diffStat,
      checks: outcome.checks.map((c) => ({ name: c.name, mode: c.mode, passed: c.passed })),
      judgement: event.judgement,
      missing: verdict.missing,
    },
  };
  // Done, with a pull request asked for: a worker pushes the branch and opens it; the session
  // completes once it is open. Never before: a request is for a result the judge accepted.
  if (verdict.done && session.config.integration.pullRequest && outcome.status === 'merged') {
    const reason = `${outcome.branch} is done: pushing it and opening its pull request`;
    return {
      changeset: {
        eventId,
        requireStates: ['INTEGRATING'],
        session: {
          record: {
            ...stamp(session),
            integration: inPhase(session, 'publishing', { verdict }),
          },
          expectedVersion: version,
        },
        outbox: [
          inBand(
            session,
            outboxJob('work', 'integrate', jobIds.publish(session.id, event.round), {
              sessionId: session.id,
              round: event.round,
              publish: true,
            }),
          ),
        ],
        history: [
          judged,
          {
            type: 'decision',
            decision: 'integration:publish',
            reason,
            inputs: { round: event.round, phase: 'publishing', branch: outcome.branch },
          },
        ],
      },
    };
  }
  if (verdict.done || fixes >= maxRounds) {
    const failed = blockingFailures(outcome).length > 0;
    const reason = verdict.done
      ? `${outcome.branch} is done: ${verdict.reason}`
      : `${outcome.branch} still lacks, after ${fixes} fix round(s) of ${maxRounds} (integration.maxRounds): ${verdict.missing.join('; ')}`;
    const to = verdict.done ? 'COMPLETED' : 'FAILED';
    return {
      changeset: {
        eventId,
        requireStates: ['INTEGRATING'],
        session: {
          record: {
            ...stamp(session),
            state: to,
            integration: inPhase(session, 'judging', { verdict }),
            ...(verdict.done
              ? {}
              : {
                  failure: {
                    code: failed ? 'INTEGRATION_CHECKS_FAILED' : 'INTEGRATION_INCOMPLETE',
                    reason,
                  },
                }),
          },
          expectedVersion: version,
        },
        history: [
          judged,
          { type: 'state_change', entity: 'session', from: 'INTEGRATING', to, reason },
        ],
      },
    };
  }

  // What is missing becomes a task for the Replanner (seed 001), as a task the judge said to
  // replan would: its subtasks replace it and run; the next round merges them.
  const task = fixTask(verdict, outcome, event.judgement, session.config.replanning.maxIterations);
  const reason = `the final judge of round ${event.round} found ${verdict.missing.length} thing(s) missing: fix round ${fixes + 1} of ${maxRounds}, task ${task.id} to the Replanner`;
  const edits = new TaskEdits(session, []);
  edits.put(task, 'what the final judgement found missing');
  edits.outbox.push(
    inBand(
      session,
      outboxJob('replan', 'replan-task', jobIds.replan(session.id, task.id, task.attempts), {
        sessionId: session.id,
        taskId: task.id,
        attempt: task.attempts,
        judgement: event.judgement,
        ...(task.result ? { result: task.result } : {}),
      }),
    ),
  );
  const record: Session = {
    ...stamp(session),
    state: 'RUNNING',
    taskIds: [...session.taskIds, task.id],
    integration: inPhase(session, 'fixing', {
      round: event.round + 1,
      fixes: fixes + 1,
      verdict,
    }),
  };
  return {
    changeset: await backToWork(
      ctx,
      version,
      eventId,
      edits,
      record,
      {
        type: 'decision',
        decision: 'integration:fix',
        reason,
        inputs: { round: event.round, phase: 'fixing', taskId: task.id, missing: verdict.missing },
      },
      [judged],
    ),
  };
}

/**
 * The pull request of the result branch the final judge found done is open: the session is
 * COMPLETED, the request's address in its outcome. Applied once, for the round that waits.
 */
export async function onPublished(
  ctx: CoordinatorContext,
  event: PublishedEvent,
  eventId: string,
): Promise<Transition> {
  const { session, version } = await ctx.store.requireSession(event.sessionId);
  const awaited = awaitedRound(session, event.round, 'publishing');
  if (!awaited) {
    return ignore(
      eventId,
      `${stands(session)}, not opening the pull request of round ${event.round}`,
    );
  }
  const { integration, outcome } = awaited;
  const { pullRequest } = event;
  const reason = `${outcome.branch} is done: ${integration.verdict?.reason ?? 'the final judge accepted it'}; opened ${pullRequest.url}`;
  return {
    changeset: {
      eventId,
      requireStates: ['INTEGRATING'],
      session: {
        record: {
          ...stamp(session),
          state: 'COMPLETED',
          integration: inPhase(session, 'publishing', { outcome: { ...outcome, pullRequest } }),
        },
        expectedVersion: version,
      },
      history: [
        {
          type: 'decision',
          decision: 'integration:published',
          reason: `opened ${pullRequest.url} for ${outcome.branch}`,
          inputs: { round: event.round, phase: 'publishing', pullRequest },
        },
        { type: 'state_change', entity: 'session', from: 'INTEGRATING', to: 'COMPLETED', reason },
      ],
    },
  };
}
