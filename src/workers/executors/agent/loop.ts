import type { HistoryEntryDraft } from '../../../shared/domain/history.js';
import type { TokenUsage } from '../../../shared/domain/task.js';
import { describeZodIssues } from '../../../shared/errors.js';
import { checkReply } from '../../llm/check-reply.js';
import type { Logger } from '../../../shared/logger.js';
import type { StepRule } from '../../../shared/config/schema.js';
import type { StepDecision } from '../../../shared/domain/human-wait.js';
import { commandOf, describeStepRule, stepRuleFor } from '../../../shared/rules/step-approval.js';
import type { StepRequest } from '../../../shared/queues.js';
import { ExecutionPaused, type StepHistory } from '../types.js';
import { ASK_HUMAN, ASK_HUMAN_SPEC, AskHumanInput } from './tools/ask-human.js';
import type { AgentRunState, AwaitingStep, ReflectionRecord } from './journal.js';
import {
  afterAction,
  afterReflection,
  afterRevision,
  canRevise,
  isBudgetSpent,
  reflectionTrigger,
  type AgentCounters,
} from './policy.js';
import type { Toolbox } from './tools/toolbox.js';
import {
  AgentDecision,
  AgentPlan,
  AgentReflection,
  type AgentModel,
  type AgentRunRequest,
  type AgentTurn,
  type PlanRevision,
} from './types.js';

export interface AgentLoopOptions {
  model: AgentModel;
  toolbox: Toolbox;
  history: StepHistory;
  /** What every model call is told about the run (tools filled in by the loop). */
  request: Omit<AgentRunRequest, 'tools'>;
  maxActions: number;
  signal: AbortSignal;
  /** Throws once the job is no longer this delivery's (ExecutorContext.confirmCurrent). */
  confirmCurrent?(): Promise<void>;
  logger: Logger;
  /** approval.steps: tool calls that wait for a person first (issue 48). */
  stepRules?: readonly StepRule[];
  /** The task's workspace, for the rules on writes outside it. */
  root?: string;
  /** A person's decision on the step the run waits at, when this delivery resumes it. */
  decision?: StepDecision;
  /** Offer ask_human (execution.askHuman; default true). */
  askHuman?: boolean;
}

type ToolOutcome = { ok: true; output: string } | { ok: false; error: string };

/** What a person's decision makes of the awaited call: run it, or tell the model why not. */
async function decidedOutcome(
  awaiting: AwaitingStep,
  decision: StepDecision,
  run: () => Promise<ToolOutcome>,
): Promise<ToolOutcome> {
  const by = decision.by ? ` (${decision.by})` : '';
  // approval.stepTimeoutSeconds passed: nobody decided, and the text says so.
  const said = decision.text ? `: ${decision.text}` : '';
  if (awaiting.kind === 'question') {
    return decision.timedOut
      ? { ok: true, output: `No answer${said}. Go on without one.` }
      : { ok: true, output: `A person answered${by}: ${decision.text ?? ''}` };
  }
  if (decision.action === 'approve') return run();
  return {
    ok: false,
    error: `${decision.timedOut ? 'This step was rejected' : `A person rejected this step${by}`}${said}. Do not run it again; find another way or finish.`,
  };
}

/** The wait a recorded awaiting step asks the coordinator to open. */
function requestOf(awaiting: AwaitingStep): StepRequest {
  if (awaiting.kind === 'question') {
    const parsed = AskHumanInput.safeParse(awaiting.input);
    return {
      kind: 'question',
      step: awaiting.step,
      question: parsed.success ? parsed.data.question : JSON.stringify(awaiting.input),
    };
  }
  const command = commandOf({ kind: 'tool', tool: awaiting.tool, input: awaiting.input });
  return {
    kind: 'step-approval',
    step: awaiting.step,
    tool: awaiting.tool,
    input: awaiting.input,
    ...(command !== undefined ? { command } : {}),
    rule: awaiting.rule ?? 'approval.steps',
  };
}

export interface AgentRunOutcome {
  /** The model said done; false when the action budget ran out first. */
  finished: boolean;
  summary: string;
  plan?: AgentPlan;
  transcript: AgentTurn[];
  counters: AgentCounters;
  usage: TokenUsage;
}

/** Strings in a tool input longer than this are cut in the history (file contents, mostly). */
const MAX_INPUT_STRING = 4000;

function clipStrings(value: unknown): unknown {
  if (typeof value === 'string') {
    return value.length > MAX_INPUT_STRING
      ? `${value.slice(0, MAX_INPUT_STRING)}[... ${value.length - MAX_INPUT_STRING} more characters]`
      : value;
  }
  if (Array.isArray(value)) return value.map(clipStrings);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, clipStrings(v)]));
  }
  return value;
}

/** The ids an off-schema agent reply is reported with. */
function replyDetails(request: Omit<AgentRunRequest, 'tools'>): Record<string, unknown> {
  return { sessionId: request.sessionId, taskId: request.task.id, attempt: request.attempt };
}

/** Keeps at most max_subtasks subtasks (seed 004's planning.max_subtasks). */
function boundPlan(plan: AgentPlan, maxSubtasks: number): AgentPlan {
  const subtasks = plan.task_decomposition.subtasks;
  if (subtasks.length <= maxSubtasks) return plan;
  return {
    ...plan,
    task_decomposition: { ...plan.task_decomposition, subtasks: subtasks.slice(0, maxSubtasks) },
  };
}

/**
 * Seed 004 inside one task: plan → act through tools → reflect on errors and every
 * trigger_interval actions → revise (at most max_revisions times) → until the model says done
 * or the action budget is spent. Every step is recorded through `history` before the loop goes
 * on, so a run resumed from `state` (see restoreRun) continues where the last one stopped.
 */
export async function runAgentLoop(
  options: AgentLoopOptions,
  resumed: AgentRunState,
): Promise<AgentRunOutcome> {
  const { model, toolbox, history, maxActions, signal, logger } = options;
  const planning = options.request.planning;
  const request: AgentRunRequest = {
    ...options.request,
    tools: options.askHuman === false ? toolbox.specs : [...toolbox.specs, ASK_HUMAN_SPEC],
  };
  const usage: TokenUsage = { inputTokens: 0, outputTokens: 0 };
  const count = (u: TokenUsage) => {
    usage.inputTokens += u.inputTokens;
    usage.outputTokens += u.outputTokens;
  };
  const transcript = [...resumed.transcript];
  let { plan, counters, pendingReflection, pendingRevision } = resumed;
  let step = resumed.nextStep;

  const record = async (entry: HistoryEntryDraft, planAfter?: AgentPlan): Promise<number> => {
    const at = step;
    const status = await history.append(at, entry, planAfter);
    if (status === 'DUPLICATE')
      logger.debug({ step: at }, 'step already recorded by an earlier delivery');
    if (status === 'GONE') logger.debug({ step: at }, 'step not recorded: the session was deleted');
    step += 1;
    return at;
  };

  const applyRevision = async (revision: PlanRevision) => {
    if (revision.plan) plan = boundPlan(revision.plan, planning.max_subtasks);
    const at = await record(
      {
        type: 'revision',
        taskId: request.task.id,
        reason: revision.reason,
        changes: revision.changes,
      },
      plan,
    );
    counters = afterRevision(counters);
    transcript.push({
      kind: 'revision',
      step: at,
      reason: revision.reason,
      changes: revision.changes,
    });
    logger.info({ step: at, revisions: counters.revisions }, 'agent revised its plan');
  };

  signal.throwIfAborted();
  if (!resumed.planned && planning.enabled) {
    const reply = await model.plan({ ...request, signal });
    count(reply.usage);
    signal.throwIfAborted();
    plan = boundPlan(
      checkReply(AgentPlan, reply.value, 'agent plan', replyDetails(request)),
      planning.max_subtasks,
    );
    await record(
      { type: 'plan', source: 'agent', taskId: request.task.id, attempt: request.attempt, plan },
      plan,
    );
  } else if (resumed.planned) {
    logger.info({ step, hasPlan: plan !== undefined }, 'agent resumes from its recorded steps');
  }
  if (pendingRevision) {
    await applyRevision(pendingRevision);
    pendingRevision = undefined;
  }

  /** Records a tool call's outcome as the next step, and what the model sees of it. */
  const recordAction = async (tool: string, input: unknown, outcome: ToolOutcome) => {
    const clipped = clipStrings(input);
    const at = await record({
      type: 'action',
      taskId: request.task.id,
      tool,
      input: clipped,
      ...(outcome.ok ? { output: outcome.output } : { error: outcome.error }),
    });
    counters = afterAction(counters);
    transcript.push({
      kind: 'action',
      step: at,
      tool,
      input: clipped,
      ...(outcome.ok ? { output: outcome.output } : { error: outcome.error }),
    });
    logger.debug({ step: at, tool, ok: outcome.ok }, 'agent action');
    pendingReflection = reflectionTrigger(counters, !outcome.ok, planning);
  };

  /** Records the call as waiting for a person and stops the run (its job ends). */
  const pause = async (awaiting: Omit<AwaitingStep, 'step'>): Promise<never> => {
    const at = await record({
      type: 'action',
      taskId: request.task.id,
      tool: awaiting.tool,
      // Whole, not clipped: an approved call runs with exactly the input the person saw.
      input: awaiting.input,
      awaiting: awaiting.kind,
      ...(awaiting.rule !== undefined ? { rule: awaiting.rule } : {}),
    });
    logger.info({ step: at, tool: awaiting.tool, kind: awaiting.kind }, 'agent waits for a person');
    throw new ExecutionPaused(requestOf({ ...awaiting, step: at }));
  };

  if (resumed.awaiting) {
    const awaiting = resumed.awaiting;
    const { decision } = options;
    // No decision for it in this job: the wait is (still) to be opened; the same event again.
    if (decision?.step !== awaiting.step) throw new ExecutionPaused(requestOf(awaiting));
    signal.throwIfAborted();
    const outcome = await decidedOutcome(awaiting, decision, async () => {
      await options.confirmCurrent?.();
      return toolbox.call(awaiting.tool, awaiting.input, signal);
    });
    logger.info(
      { step: awaiting.step, tool: awaiting.tool, decision: decision.action },
      'agent resumes after a person decided',
    );
    await recordAction(awaiting.tool, awaiting.input, outcome);
  }

  for (;;) {
    // Between steps: a cancelled job or a finished session stops the run here.
    signal.throwIfAborted();
    if (pendingReflection) {
      const reply = await model.reflect({
        ...request,
        signal,
        plan,
        transcript,
        actionsLeft: maxActions - counters.actions,
        trigger: pendingReflection,
        revisionsLeft: Math.max(0, planning.revision.max_revisions - counters.revisions),
      });
      count(reply.usage);
      signal.throwIfAborted();
      const reflection = checkReply(
        AgentReflection,
        reply.value,
        'agent reflection',
        replyDetails(request),
      );
      const revise = reflection.plan_revision_needed && canRevise(counters, planning);
      const evaluation: ReflectionRecord = {
        ...reflection,
        trigger: pendingReflection,
        revision_applied: revise,
      };
      const at = await record({
        type: 'reflection',
        taskId: request.task.id,
        evaluation: { ...evaluation },
      });
      counters = afterReflection(counters);
      transcript.push({ kind: 'reflection', step: at, reflection, trigger: pendingReflection });
      pendingReflection = undefined;
      if (revise) {
        await applyRevision(
          reflection.plan_revision ?? { reason: reflection.evaluation, changes: [] },
        );
      } else if (reflection.plan_revision_needed) {
        logger.info({ step: at }, 'agent asked for a revision but max_revisions is reached');
      }
      continue;
    }

    if (isBudgetSpent(counters, maxActions)) {
      return {
        finished: false,
        summary: `Stopped: the action budget of ${maxActions} was spent before the agent said it was done.`,
        ...(plan ? { plan } : {}),
        transcript,
        counters,
        usage,
      };
    }

    const reply = await model.nextAction({
      ...request,
      signal,
      plan,
      transcript,
      actionsLeft: maxActions - counters.actions,
    });
    count(reply.usage);
    // A model that ignores the signal still gets no tool run once the run is cancelled.
    signal.throwIfAborted();
    const decision = AgentDecision.safeParse(reply.value);
    let tool: string;
    let input: unknown;
    let outcome: { ok: true; output: string } | { ok: false; error: string };
    if (!decision.success) {
      // A malformed decision is an observation too: the model gets to correct itself, and it
      // counts against the budget, so the loop stays bounded.
      tool = '(invalid)';
      input = clipStrings(reply.value);
      outcome = {
        ok: false,
        error: `invalid decision: ${describeZodIssues(decision.error)
          .map((i) => `${i.path}: ${i.message}`)
          .join('; ')}; answer with {tool, input} or {done, summary}`,
      };
    } else if ('done' in decision.data) {
      return {
        finished: true,
        summary: decision.data.summary,
        ...(plan ? { plan } : {}),
        transcript,
        counters,
        usage,
      };
    } else {
      tool = decision.data.tool;
      input = decision.data.input;
      if (tool === ASK_HUMAN && options.askHuman !== false) {
        const asked = AskHumanInput.safeParse(input);
        if (asked.success) await pause({ kind: 'question', tool, input: asked.data });
        outcome = { ok: false, error: 'ask_human takes {question: "…"}' };
      } else {
        const rule = stepRuleFor(
          options.stepRules ?? [],
          { kind: 'tool', tool, input },
          options.root ?? '/',
        );
        if (rule) await pause({ kind: 'step-approval', tool, input, rule: describeStepRule(rule) });
        // A tool changes files or starts programs: not for a delivery that lost its job.
        await options.confirmCurrent?.();
        outcome = await toolbox.call(tool, input, signal);
      }
    }
    await recordAction(tool, input, outcome);
  }
}
