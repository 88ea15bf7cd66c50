import type { ExecutorContext } from './types.js';

/** Dependency outputs are cut to this many characters each; the full ones are in the history. */
const DEPENDENCY_OUTPUT_CHARS = 4000;

/**
 * The task as a prompt for an agent (a coding-agent CLI, or the agent executor's model): what
 * to do, how it is judged, and what the tasks before it produced.
 */
export function taskPrompt(
  ctx: Pick<ExecutorContext, 'session' | 'task' | 'attempt' | 'dependencyResults' | 'feedback'>,
): string {
  const { task } = ctx;
  const lines = [`Task ${task.id}: ${task.title}`, '', `Acceptance criteria: ${task.acceptance}`];
  if (task.context.trim() !== '') lines.push('', `Context: ${task.context}`);
  if (task.scopePaths.length > 0) lines.push('', `Files in scope: ${task.scopePaths.join(', ')}`);
  lines.push('', `This task is part of the instruction: "${ctx.session.instruction}"`);
  if (ctx.dependencyResults.length > 0) {
    lines.push('', 'Results of the tasks this one depends on:');
    for (const dep of ctx.dependencyResults) {
      const output =
        dep.output.length > DEPENDENCY_OUTPUT_CHARS
          ? `${dep.output.slice(0, DEPENDENCY_OUTPUT_CHARS)} [...]`
          : dep.output;
      lines.push(`- ${dep.taskId} (${dep.title}): ${output}`);
    }
  }
  if (ctx.feedback) {
    lines.push('', `Feedback to address in this attempt: ${ctx.feedback}`);
  }
  return lines.join('\n');
}
