import { z } from 'zod';

/**
 * What a running execution is doing, kept as its work job's BullMQ progress: Bull Board shows
 * it, and `orq status`, the live view and GET /sessions/:id read it for executing tasks. Only
 * executors that run long report it (agent steps, a coding agent's output); a single model
 * call does not, so the common hop pays no extra write.
 */
export const TaskProgress = z.object({
  /** The execution (task attempt) it belongs to: an older attempt's progress is not shown. */
  attempt: z.number().int().min(1),
  at: z.string().datetime(),
  /** One line a person reads: `step 3: action write_file`, `agent: 12KB of output; …`. */
  activity: z.string(),
  /** Agent executor: the step just recorded (0 is the plan), its type and tool. */
  step: z.number().int().min(0).optional(),
  type: z.string().optional(),
  tool: z.string().optional(),
  /** Command executor: bytes the running command has printed so far. */
  outputBytes: z.number().int().min(0).optional(),
});
export type TaskProgress = z.infer<typeof TaskProgress>;

/** What an executor reports; the worker adds the attempt and the time. */
export type ProgressUpdate = Omit<TaskProgress, 'attempt' | 'at'>;
