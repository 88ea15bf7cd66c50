import type { Command } from 'commander';
import type {
  AnswerCliOptions,
  EditCliOptions,
  PlanCliOptions,
  QuestionCliOptions,
} from './approval-actions.js';
import { configOption } from '../options.js';

// What the commands do loads when one runs, as for the other session commands.
const actions = () => import('./approval-actions.js');

const waitOption = [
  '--wait <waitId>',
  'the wait you looked at (orq status shows it): refused if the session now waits on another',
] as const;

const taskOption = [
  '--task <taskId>',
  'answer the step approval of this task (approval.steps) rather than the plan',
] as const;

/** plan, approve, reject, answer, edit: a person's answers to a session waiting for them (issue 48). */
export function registerApprovalCommands(program: Command): void {
  program
    .command('plan')
    .description('Print the plan a session waits to have approved, as YAML to edit (or JSON)')
    .argument('<sessionId>')
    .option(...configOption)
    .option('--json', 'print the wait (plan, score, issues, suggestions) as JSON')
    .action(async (sessionId: string, options: PlanCliOptions) =>
      (await actions()).printPlan(sessionId, options),
    );

  program
    .command('approve')
    .description(
      'Approve the plan a session waits on (its tasks start), or a step that waits (--wait step-…, --task): it runs',
    )
    .argument('<sessionId>')
    .option(...configOption)
    .option(...waitOption)
    .option(...taskOption)
    .option('--comment <text>', 'recorded in the history with the approval')
    .action(async (sessionId: string, options: AnswerCliOptions) =>
      (await actions()).approve(sessionId, options),
    );

  program
    .command('reject')
    .description(
      'Reject the plan a session waits on (the Planner replans with your feedback, one refinement attempt), or a step that waits (its executor hears your reason)',
    )
    .argument('<sessionId>')
    .requiredOption(
      '--feedback <text>',
      'what the Planner should change, or why the step must not run',
    )
    .option(...configOption)
    .option(...waitOption)
    .option(...taskOption)
    .action(async (sessionId: string, options: AnswerCliOptions & { feedback: string }) =>
      (await actions()).reject(sessionId, options),
    );

  program
    .command('answer')
    .description(
      'Answer the question a blocked task, or a running agent (ask_human), asks (orq status shows it): the task goes on with your answer',
    )
    .argument('<sessionId>')
    .argument('<text>', 'your answer')
    .option(...configOption)
    .option('--task <taskId>', 'the task whose question you answer (needed when several ask)')
    .option(...waitOption)
    .action(async (sessionId: string, text: string, options: QuestionCliOptions) =>
      (await actions()).answerQuestion(sessionId, text, options),
    );

  program
    .command('edit')
    .description(
      'Run your edit of the plan a session waits on (a YAML or JSON file, - for stdin), checked as a replan is',
    )
    .argument('<sessionId>')
    .argument(
      '<planFile>',
      'the plan: { summary, tasks: [{ id, title, acceptance, dependencies }] }',
    )
    .option(...configOption)
    .option(...waitOption)
    .option('--allow-term-loss', 'run it even though it drops required terms of the instruction')
    .option('--comment <text>', 'recorded in the history with the edit')
    .action(async (sessionId: string, planFile: string, options: EditCliOptions) =>
      (await actions()).edit(sessionId, planFile, options),
    );
}
