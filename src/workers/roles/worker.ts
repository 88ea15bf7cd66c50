import type { Job } from 'bullmq';
import { OrqError, parseOrThrow } from '../../shared/errors.js';
import type { DependencyResult } from '../llm/types.js';
import {
  ExecuteJob,
  jobIds,
  outboxJob,
  type StepRequest,
  type TaskCard,
  withPriorityOf,
} from '../../shared/queues.js';
import type { TaskSnapshot } from '../../shared/store/session-records.js';
import { inlineResult, taskCard, taskFromCard } from '../../shared/task-card.js';
import type { ProgressUpdate, TaskProgress } from '../../shared/domain/progress.js';
import { TaskResult } from '../../shared/domain/task.js';
import { createExecutorRegistry, type ExecutorRegistry } from '../executors/registry.js';
import { reportingProgress, storeStepHistory } from '../executors/step-history.js';
import {
  checkReply,
  HANDED_ON,
  handedOnAlready,
  inlineOutput,
  isCurrentExecution,
  referencedDependencies,
  type RoleContext,
  usableCard,
  withoutOutputs,
} from './context.js';
import { confirmDelivery, DeliveryLostError } from '../delivery.js';
import { ExecutionPaused } from '../executors/types.js';

/** Worker: executes one task with the results of its dependencies, hands the result to the Judge. */
export function createWorkerProcessor(
  ctx: RoleContext,
  executors: ExecutorRegistry = createExecutorRegistry(),
) {
  return async (job: Job, token?: string, signal?: AbortSignal): Promise<string> => {
    const data = parseOrThrow(ExecuteJob, job.data, 'execute job');
    // Fair release's V follows the jobs workers take (fair-release.ts); sent in the background.
    if (data.fairTag !== undefined) ctx.queues.fair.started(data.fairTag);
    // A redelivery looks for the hand-off of the latest delivery, by the fence that one took.
    if (job.attemptsStarted > 1) {
      const latest = await ctx.store.currentFence(data.sessionId, data.taskId, data.attempt);
      const handOff = jobIds.judgeTask(data.sessionId, data.taskId, data.attempt, latest);
      if (await handedOnAlready(ctx, job, 'judge', handOff)) return HANDED_ON;
    }
    // The job's card is used while the task's version is still the card's: the read below is
    // then a version check, and brings only the dependencies' outputs the card references.
    // It takes this delivery's fence: an earlier delivery's result is refused from now on.
    const card = usableCard(data);
    const { snapshot, tasks, unchanged, fence } = await ctx.store.loadForTask(
      data.sessionId,
      [data.taskId, ...(card ? referencedDependencies(card) : (data.dependencies ?? []))],
      undefined,
      card ? new Map([[data.taskId, card.version]]) : undefined,
      { taskId: data.taskId, attempt: data.attempt },
    );
    if (!snapshot || snapshot.session.state !== 'RUNNING') return 'session not running';
    const judgeJobId = jobIds.judgeTask(data.sessionId, data.taskId, data.attempt, fence);
    const held = card && unchanged.has(data.taskId) ? taskFromCard(card) : undefined;
    const current = tasks.get(data.taskId);
    if (!held && (!current || !isCurrentExecution(current.task, data.attempt))) return 'stale';
    const task = held ?? (current as TaskSnapshot).task;
    const version = held ? (card as TaskCard).version : (current as TaskSnapshot).version;
    const unread = task.dependencies.filter(
      (id) => !tasks.has(id) && !(held && inlineOutput(card as TaskCard, id) !== undefined),
    );
    const deps =
      unread.length > 0
        ? new Map([...tasks, ...(await ctx.store.loadTasks(data.sessionId, unread))])
        : tasks;
    const dependencyResults: DependencyResult[] = task.dependencies.flatMap((id) => {
      const inline = held
        ? (card as TaskCard).dependencies.find((d) => d.taskId === id)
        : undefined;
      if (inline?.output !== undefined) {
        return [{ taskId: id, title: inline.title, output: inline.output }];
      }
      const dep = deps.get(id)?.task;
      return dep?.result ? [{ taskId: id, title: dep.title, output: dep.result.output }] : [];
    });
    const started = Date.now();
    const executor = executors.resolve(task, snapshot.session);
    const logger = ctx.logger.child({
      role: 'worker',
      sessionId: data.sessionId,
      taskId: data.taskId,
      executor: executor.name,
    });
    // One signal for the whole execution: BullMQ's (shutdown) or the session finishing.
    const controls = ctx.models.forExecution(snapshot.session, data.taskId, signal);
    const progress = (update: ProgressUpdate) => {
      const value: TaskProgress = {
        ...update,
        attempt: data.attempt,
        at: new Date().toISOString(),
      };
      job.updateProgress(value).catch((error: unknown) => {
        logger.debug(
          { err: error instanceof Error ? error.message : String(error) },
          'progress not stored',
        );
      });
    };
    // The session's end stopped this execution. Quietly, unless the session runs again by now
    // (a BUDGET_EXHAUSTED session resumed): then the job is tried again, or the task would be
    // left RUNNING with no execution and the session would never end.
    const stoppedBySessionEnd = async (): Promise<string> => {
      const now = await ctx.store.loadSession(data.sessionId);
      if (now?.session.state !== 'RUNNING') return 'session not running';
      throw new OrqError(
        'INVALID_STATE',
        `execution of ${data.taskId} was stopped by an end of session ${data.sessionId}, which runs again; retrying it`,
        { details: { sessionId: data.sessionId, taskId: data.taskId, attempt: data.attempt } },
      );
    };
    // Right before each side effect: is the job still this delivery's (issue 35)? The checks
    // above ran once, before a set-up that can take seconds and a pause that can outlast the lock.
    const confirmCurrent = () => confirmDelivery(job, token, ctx.lockDurationMs, signal);
    // The execution's usage goes on with its result to the judge, whose read counts it.
    return ctx.models.withUsageTally(data.sessionId, async (usageTally) => {
      let reply: unknown;
      let paused: StepRequest | undefined;
      try {
        reply = await executor.execute({
          session: snapshot.session,
          task,
          attempt: data.attempt,
          dependencyResults,
          ...(task.feedback ? { feedback: task.feedback } : {}),
          models: await ctx.models.forSession(snapshot.session, 'worker'),
          usageTally,
          meterChat: controls.meterChat,
          limitChat: controls.limitChat,
          history: reportingProgress(
            storeStepHistory(ctx.store, snapshot.session, data.taskId, data.attempt),
            progress,
          ),
          progress,
          signal: controls.signal,
          confirmCurrent,
          logger,
          jobAttempt: job.attemptsMade,
          ...(data.resume ? { stepDecision: data.resume } : {}),
        });
      } catch (error) {
        if (error instanceof ExecutionPaused && !controls.sessionFinished()) {
          paused = error.request;
        } else {
          // Stopped because the session finished: nothing failed that the coordinator must hear of.
          if (!controls.sessionFinished()) throw error;
          logger.info(
            { err: error instanceof Error ? error.message : String(error) },
            'execution stopped: the session finished',
          );
          return stoppedBySessionEnd();
        }
      } finally {
        controls.release();
      }
      if (paused) {
        // The step waits for a person (issue 48): the coordinator opens the wait, and this job
        // ends, holding no worker, lock or quota. The step is in the journal already, so a
        // delivery that dies here is run again and sends the same event (same id).
        await confirmDelivery(job, token, ctx.lockDurationMs);
        await ctx.queues.add(
          withPriorityOf(
            job,
            outboxJob(
              'coordinator',
              'step-waiting',
              jobIds.stepWaiting(data.sessionId, data.taskId, data.attempt, paused.step),
              {
                sessionId: data.sessionId,
                taskId: data.taskId,
                attempt: data.attempt,
                request: paused,
              },
            ),
          ),
        );
        logger.info({ step: paused.step, kind: paused.kind }, 'execution waits for a person');
        return 'waiting for a person';
      }
      if (controls.sessionFinished()) return stoppedBySessionEnd();
      const result = checkReply(TaskResult, reply, 'execution result', {
        sessionId: data.sessionId,
        taskId: data.taskId,
        attempt: data.attempt,
      });
      // A result is handed on only by the delivery that still holds the job: one that lost it
      // (paused past its lock) may hand on after another delivery's result was judged. (Not
      // refused for a shutdown's abort: a result the executor finished is handed on still.)
      // A pause between this check and the add is caught by the fence: the coordinator refuses
      // the result once a later delivery has taken a higher one.
      await confirmDelivery(job, token, ctx.lockDurationMs);
      const handed = { ...result, durationMs: result.durationMs || Date.now() - started };
      // A result too long to copy rides as a reference: stored first, read by the judge.
      const inline = inlineResult(handed);
      if (!inline) {
        const stored = await ctx.store.putResult(
          data.sessionId,
          data.taskId,
          data.attempt,
          handed,
          fence,
        );
        if (stored === 'GONE') return 'session gone';
        // A later delivery of this attempt has taken the job: its result is the one judged.
        if (stored === 'FENCED') throw new DeliveryLostError(job.queueName, job.id);
      }
      await ctx.queues.add(
        withPriorityOf(
          job,
          outboxJob('judge', 'judge-task', judgeJobId, {
            sessionId: data.sessionId,
            taskId: data.taskId,
            attempt: data.attempt,
            ...(inline ? { result: inline } : { storedResult: true as const }),
            ...usageTally.field(),
            // The task as run; its dependencies by reference (the judge does not read them).
            task: withoutOutputs(held ? (card as TaskCard) : taskCard(task, data.attempt, version)),
            ...(fence ? { fence } : {}),
          }),
        ),
      );
      usageTally.passedOn();
      return 'executed';
    });
  };
}
