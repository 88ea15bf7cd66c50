import { commandLine, describeStepRule, stepRuleFor } from '../../shared/rules/step-approval.js';
import type { StepRequest } from '../../shared/queues.js';
import { ExecutionPaused, type ExecutorContext } from './types.js';

/**
 * approval.steps for a program an executor is about to start (the command executor's coding
 * agent, issue 48). The step is kept in the execution's journal (ctx.history): the first time,
 * an `awaiting` action is recorded and the run stops (ExecutionPaused, its job ends); the
 * delivery that carries the person's decision records it as the next step, so a later delivery
 * of the same execution finds it there and does not ask again.
 */

export type CommandGate = { run: true } | { run: false; reason: string };

export async function gateCommand(
  ctx: ExecutorContext,
  options: {
    /** Which run of the execution this is (the command executor's round). */
    round: number;
    argv: readonly string[];
    /** The command line as shown to the person (the prompt elided). */
    shown: string;
    root: string;
  },
): Promise<CommandGate> {
  const line = commandLine(options.argv);
  const rule = stepRuleFor(
    ctx.session.config.approval.steps,
    { kind: 'command', command: line },
    options.root,
  );
  if (!rule) return { run: true };
  const records = await ctx.history.load();
  const asked = records.find(
    ({ entry }) =>
      entry.type === 'action' &&
      entry.awaiting === 'step-approval' &&
      entry.tool === 'command' &&
      (entry.input as { round?: unknown } | null)?.round === options.round,
  );
  const request = (step: number): StepRequest => ({
    kind: 'step-approval',
    step,
    tool: 'command',
    input: { round: options.round, argv: options.argv },
    command: options.shown,
    rule: describeStepRule(rule),
  });
  if (!asked) {
    const step = records.length;
    await ctx.history.append(step, {
      type: 'action',
      taskId: ctx.task.id,
      tool: 'command',
      input: { round: options.round, argv: options.argv },
      awaiting: 'step-approval',
      rule: describeStepRule(rule),
    });
    ctx.logger.info({ step, command: options.shown }, 'the command waits for a person');
    throw new ExecutionPaused(request(step));
  }
  const decided = records.find((r) => r.step === asked.step + 1)?.entry;
  if (decided?.type === 'action') {
    return decided.error !== undefined ? { run: false, reason: decided.error } : { run: true };
  }
  const decision = ctx.stepDecision;
  if (decision?.step !== asked.step) throw new ExecutionPaused(request(asked.step));
  const by = decision.timedOut ? ' on its timeout' : decision.by ? ` by ${decision.by}` : '';
  const approved = decision.action === 'approve';
  const said = decision.text ? `: ${decision.text}` : '';
  // approval.stepTimeoutSeconds passed: nobody decided, and the text says so.
  const reason = decision.timedOut
    ? `running \`${options.shown}\` was rejected${said}`
    : `a person rejected running \`${options.shown}\`${by}${said}`;
  await ctx.history.append(asked.step + 1, {
    type: 'action',
    taskId: ctx.task.id,
    tool: 'command',
    input: { round: options.round },
    ...(approved ? { output: `approved${by}` } : { error: reason }),
  });
  return approved ? { run: true } : { run: false, reason };
}
