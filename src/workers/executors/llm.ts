import type { Executor } from './types.js';

/** One model call that produces the task's deliverable (the worker's original behaviour). */
export function createLlmExecutor(): Executor {
  return {
    name: 'llm',
    execute: (ctx) =>
      ctx.models.execute({
        sessionId: ctx.session.id,
        task: ctx.task,
        attempt: ctx.attempt,
        dependencyResults: ctx.dependencyResults,
        ...(ctx.feedback ? { feedback: ctx.feedback } : {}),
        instruction: ctx.session.instruction,
        signal: ctx.signal,
        jobAttempt: ctx.jobAttempt,
        ...(ctx.usageTally ? { usageTally: ctx.usageTally } : {}),
      }),
  };
}
