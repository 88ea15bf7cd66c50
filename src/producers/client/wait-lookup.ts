/**
 * Which open wait an answer is for (the plan approval, a question, a step approval), refused
 * before anything is enqueued when it is not open any more (WAIT_ENDED) or is ambiguous.
 */
import type { Session } from '../../shared/domain/session.js';
import { isExecuting } from '../../shared/domain/task.js';
import type {
  PlanApprovalWait,
  QuestionWait,
  StepApprovalWait,
  WaitAnswer,
} from '../../shared/domain/human-wait.js';
import { OrqError, ValidationError, WaitEndedError } from '../../shared/errors.js';
import { BUDGET_RESUME_HINT } from '../../shared/budget.js';
import { checkPlanEdit } from '../../shared/rules/plan-edit.js';
import type { SessionStore } from '../../shared/store/session-store.js';
import type { AnswerOptions } from './schemas.js';

type OpenWait = PlanApprovalWait | QuestionWait | StepApprovalWait;

/**
 * The wait an answer is for: a question for an `answer`, a step approval for an approve or
 * reject that names one (or when only steps wait), else the plan approval. An edited plan is
 * checked as a replan is.
 */
export async function openWaitFor(
  store: SessionStore,
  session: Session,
  answer: WaitAnswer,
  options: AnswerOptions,
): Promise<OpenWait> {
  const wait =
    answer.action === 'answer'
      ? await openQuestionOrThrow(store, session, options)
      : answer.action !== 'edit' && answersStep(session, options)
        ? await openStepOrThrow(store, session, options)
        : openPlanWaitOrThrow(session, options.waitId);
  if (answer.action === 'edit' && wait.kind === 'plan-approval') {
    checkEditedPlan(session, wait, answer);
  }
  return wait;
}

/** The wait `waitId` names, else the one of task `taskId`, else the only one open. */
function pickWait<W extends { id: string; taskId: string }>(
  open: readonly W[],
  { waitId, taskId }: AnswerOptions,
): W | undefined {
  return waitId !== undefined
    ? open.find((w) => w.id === waitId && (taskId === undefined || w.taskId === taskId))
    : taskId !== undefined
      ? open.find((w) => w.taskId === taskId)
      : open.length === 1
        ? open[0]
        : undefined;
}

/**
 * The question an answer is for: the one `waitId` names, else the one task `taskId` asks, else
 * the only one open. WAIT_ENDED when it is not open (answered, the task resumed or moved on).
 */
async function openQuestionOrThrow(
  store: SessionStore,
  session: Session,
  { waitId, taskId }: AnswerOptions,
): Promise<QuestionWait> {
  const open = session.questions ?? [];
  if (session.state === 'BUDGET_EXHAUSTED') {
    const asked = pickWait(open, waitId !== undefined ? { waitId } : { taskId });
    if (asked) throw budgetStoppedQuestion(session, asked);
  }
  const live = ['RUNNING', 'BLOCKED'].includes(session.state);
  const found = live ? pickWait(open, { waitId, taskId }) : undefined;
  if (!found && live && waitId === undefined && taskId === undefined && open.length > 1) {
    throw new OrqError('VALIDATION_FAILED', `session ${session.id} asks ${open.length} questions`, {
      hint: `Name the task whose question you answer: ${open.map((q) => q.taskId).join(', ')}.`,
      details: { sessionId: session.id, waitIds: open.map((q) => q.id) },
    });
  }
  if (!found) {
    const what = waitId ?? (taskId ? `the question of task ${taskId}` : undefined);
    const why = !live
      ? `it is ${session.state}`
      : open.length === 0
        ? 'no question is open'
        : `the open questions are ${open.map((q) => q.id).join(', ')}`;
    const current = taskId ? open.find((q) => q.taskId === taskId)?.id : undefined;
    throw new WaitEndedError(session.id, what, why, current);
  }
  // The session's record says open; the task says whether it still waits at that execution:
  // BLOCKED for a Judge's question, still executing for an agent's (issue 48).
  const task = (await store.loadTasks(session.id, [found.taskId])).get(found.taskId)?.task;
  const waiting =
    found.step === undefined ? task?.state === 'BLOCKED' : !!task && isExecuting(task);
  if (!waiting || task?.attempts !== found.attempt) {
    throw new WaitEndedError(session.id, found.id, `task ${found.taskId} moved on`);
  }
  return found;
}

/**
 * The question of a session its budget stopped, which stays open: nothing runs to apply an
 * answer until the budget is raised, so the answer is refused, saying how to go on.
 */
export function budgetStoppedQuestion(session: Session, question: QuestionWait): OrqError {
  return new OrqError(
    'BUDGET_EXHAUSTED',
    `session ${session.id} is stopped by its budget (BUDGET_EXHAUSTED); its question ${question.id} stays open, and is answered once the budget is raised`,
    {
      hint: `${BUDGET_RESUME_HINT}: orq resume ${session.id} --max-tokens <n> or --max-usd <usd> (HTTP: POST /sessions/${session.id}/resume with a budget); then answer: orq answer ${session.id} --task ${question.taskId} "…"`,
      details: { sessionId: session.id, waitId: question.id, taskId: question.taskId },
    },
  );
}

/**
 * The step approval an approve or reject is for (approval.steps): the one `waitId` names, else
 * the one of task `taskId`, else the only one open. WAIT_ENDED when it is not open.
 */
async function openStepOrThrow(
  store: SessionStore,
  session: Session,
  { waitId, taskId }: AnswerOptions,
): Promise<StepApprovalWait> {
  const open = session.state === 'RUNNING' ? (session.stepWaits ?? []) : [];
  const found = pickWait(open, { waitId, taskId });
  if (!found && waitId === undefined && taskId === undefined && open.length > 1) {
    throw new OrqError(
      'VALIDATION_FAILED',
      `session ${session.id} has ${open.length} steps waiting`,
      {
        hint: `Name the wait you answer (--wait): ${open.map((w) => w.id).join(', ')}.`,
        details: { sessionId: session.id, waitIds: open.map((w) => w.id) },
      },
    );
  }
  if (!found) {
    const why =
      session.state !== 'RUNNING'
        ? `it is ${session.state}`
        : open.length === 0
          ? 'no step waits for approval'
          : `the steps waiting are ${open.map((w) => w.id).join(', ')}`;
    throw new WaitEndedError(
      session.id,
      waitId ?? (taskId ? `the step of task ${taskId}` : undefined),
      why,
    );
  }
  const task = (await store.loadTasks(session.id, [found.taskId])).get(found.taskId)?.task;
  if (!task || !isExecuting(task) || task.attempts !== found.attempt) {
    throw new WaitEndedError(session.id, found.id, `task ${found.taskId} moved on`);
  }
  return found;
}

/** Whether an approve or reject is for a step approval rather than the plan's. */
function answersStep(session: Session, { waitId, taskId }: AnswerOptions): boolean {
  return waitId !== undefined
    ? waitId.startsWith('step-')
    : taskId !== undefined ||
        (session.state !== 'AWAITING_APPROVAL' && (session.stepWaits ?? []).length > 0);
}

/** The plan approval the session waits on, if `waitId` (when given) names it. */
function openPlanWaitOrThrow(session: Session, waitId: string | undefined): PlanApprovalWait {
  const { wait } = session;
  if (session.state !== 'AWAITING_APPROVAL' || !wait) {
    throw new WaitEndedError(session.id, waitId, `it is ${session.state}, not AWAITING_APPROVAL`);
  }
  if (waitId !== undefined && wait.id !== waitId) {
    throw new WaitEndedError(session.id, waitId, `a later plan waits now`, wait.id);
  }
  return wait;
}

/** An edited plan passes the rules a replan passes: structure and required terms. */
function checkEditedPlan(
  session: Session,
  wait: PlanApprovalWait,
  edit: Extract<WaitAnswer, { action: 'edit' }>,
): void {
  const check = checkPlanEdit({
    waiting: wait.plan,
    edited: edit.plan,
    config: session.config.refinement,
    requiredTerms: session.requiredTerms,
    maxTasks: session.config.budget.maxTasks,
    allowTermLoss: edit.allowTermLoss === true,
  });
  if (!check.accepted) {
    throw new ValidationError(
      'edited plan',
      check.problems.map((message) => ({ path: 'plan', message })),
      {
        hint: 'An edit passes the rules a replan passes (docs/people-in-the-loop.md).',
        details: { sessionId: session.id, waitId: wait.id, droppedTerms: check.droppedTerms },
      },
    );
  }
}
