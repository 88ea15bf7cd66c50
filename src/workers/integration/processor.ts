import type { Job } from 'bullmq';
import { INTEGRATION_FENCE_ID, type IntegrationOutcome } from '../../shared/domain/integration.js';
import type { Session } from '../../shared/domain/session.js';
import type { Task } from '../../shared/domain/task.js';
import type { CommandExecutorConfig } from '../../shared/config/schema.js';
import { parseOrThrow, ValidationError } from '../../shared/errors.js';
import { IntegrateJob, jobIds, outboxJob } from '../../shared/queues.js';
import { branchesToMerge, resultBranchName } from '../../shared/rules/integration-plan.js';
import { confirmDelivery } from '../delivery.js';
import { withoutPodSecrets } from '../executors/process.js';
import { HANDED_ON, handedOnAlready, type RoleContext } from '../roles/context.js';
import { integrateBranches } from './merge.js';
import { describeRequest, openPullRequest } from './pull-request.js';

/**
 * The integrate job (a worker pod's, like the tasks' own git work): merges the session's task
 * branches into its result branch, runs its checks there, and hands the outcome to the
 * coordinator, which alone changes the session. Each delivery takes a fence as it reads the
 * session, so the coordinator refuses the outcome of one a later delivery superseded.
 */
export function createIntegrationProcessor(ctx: RoleContext) {
  return async (job: Job, token?: string, signal?: AbortSignal): Promise<string> => {
    const data = parseOrThrow(IntegrateJob, job.data, 'integrate job');
    const { sessionId, round } = data;
    if (data.publish) return publish(ctx, job, token, signal, data);
    if (job.attemptsStarted > 1) {
      const latest = await ctx.store.currentFence(sessionId, INTEGRATION_FENCE_ID, round);
      const handOff = jobIds.integrated(sessionId, round, latest);
      if (await handedOnAlready(ctx, job, 'coordinator', handOff)) return HANDED_ON;
    }
    const { snapshot, fence } = await ctx.store.loadForTask(sessionId, [], undefined, undefined, {
      taskId: INTEGRATION_FENCE_ID,
      attempt: round,
    });
    if (!snapshot || snapshot.session.state !== 'INTEGRATING') return 'session not integrating';
    // The whole record: the task list is not among the parts loadForTask keeps current.
    const { session } = await ctx.store.requireSession(sessionId);
    if (session.integration?.round !== round) return 'stale';
    const command = session.config.execution.command;
    if (!command) {
      throw new ValidationError('integration', [
        { path: 'execution.command', message: 'the integration needs the repository it names' },
      ]);
    }
    const tasks = await ctx.store.loadTasksInOrder(sessionId, session.taskIds);
    const logger = ctx.logger.child({ role: 'worker', sessionId, jobId: job.id, round });
    // Stopped by BullMQ (shutdown, lost lock) or by the session's end (a cancel): a merge or a
    // check under way is killed, and nothing is written or handed on.
    const controls = ctx.models.forExecution(session, INTEGRATION_FENCE_ID, signal);
    const stopped = controls.signal;
    const confirmCurrent = () => confirmDelivery(job, token, ctx.lockDurationMs, stopped);
    let outcome: IntegrationOutcome;
    try {
      outcome = await integrate(session, command, tasks, stopped, confirmCurrent);
    } catch (error) {
      if (!controls.sessionFinished()) throw error;
      logger.info({ err: (error as Error).message }, 'integration stopped: the session ended');
      return 'session ended';
    } finally {
      controls.release();
    }
    logger.info(
      { status: outcome.status, commit: outcome.commit, tasks: outcome.tasks.length },
      'integration finished',
    );
    // Handed on only by the delivery that still holds the job; a pause past this check is
    // caught by the fence.
    await confirmDelivery(job, token, ctx.lockDurationMs);
    await ctx.queues.add(
      outboxJob('coordinator', 'integrated', jobIds.integrated(sessionId, round, fence), {
        sessionId,
        round,
        outcome,
        ...(fence ? { fence } : {}),
      }),
    );
    return outcome.status;
  };
}

/** The round's merge and checks, in the repository the command executor worked in. */
function integrate(
  session: Session,
  command: CommandExecutorConfig,
  tasks: readonly Task[],
  signal: AbortSignal,
  confirmCurrent: () => Promise<void>,
): Promise<IntegrationOutcome> {
  const round = session.integration?.round ?? 1;
  return integrateBranches({
    sessionId: session.id,
    round,
    repository: command.repository,
    ...(command.baseBranch ? { baseRef: command.baseBranch } : {}),
    branches: branchesToMerge(tasks),
    config: session.config.integration,
    checks: command.checks,
    timeoutSeconds: command.timeoutSeconds,
    maxOutputBytes: command.maxOutputBytes,
    workspaceRoot: session.config.execution.workspaceRoot,
    env: {
      ...withoutPodSecrets(),
      ORQ_SESSION_ID: session.id,
      ORQ_BRANCH: resultBranchName(session.id),
    },
    signal,
    confirmCurrent,
  });
}

/**
 * The publish job of a round the final judge found done (integration.pullRequest): pushes the
 * result branch and opens its pull request, then hands the request on. Safe to deliver twice:
 * the request is found before it is opened, so it is opened once; the event's id is the
 * round's, so it is applied once.
 */
async function publish(
  ctx: RoleContext,
  job: Job,
  token: string | undefined,
  signal: AbortSignal | undefined,
  { sessionId, round }: IntegrateJob,
): Promise<string> {
  const { session } = await ctx.store.requireSession(sessionId);
  const integration = session.integration;
  const outcome = integration?.outcome;
  const config = session.config.integration.pullRequest;
  if (
    session.state !== 'INTEGRATING' ||
    integration?.phase !== 'publishing' ||
    integration.round !== round ||
    !outcome ||
    !config
  ) {
    return 'stale';
  }
  const controls = ctx.models.forExecution(session, INTEGRATION_FENCE_ID, signal);
  let pullRequest: NonNullable<IntegrationOutcome['pullRequest']>;
  try {
    await confirmDelivery(job, token, ctx.lockDurationMs, controls.signal);
    const baseBranch = session.config.execution.command?.baseBranch;
    pullRequest = await openPullRequest({
      config,
      repository: outcome.repository,
      branch: outcome.branch,
      ...(baseBranch ? { baseBranch } : {}),
      ...describeRequest(session.instruction, session.id, outcome),
      signal: controls.signal,
    });
  } catch (error) {
    if (!controls.sessionFinished()) throw error;
    return 'session ended';
  } finally {
    controls.release();
  }
  await confirmDelivery(job, token, ctx.lockDurationMs);
  await ctx.queues.add(
    outboxJob('coordinator', 'published', jobIds.published(sessionId, round), {
      sessionId,
      round,
      pullRequest,
    }),
  );
  return 'published';
}
