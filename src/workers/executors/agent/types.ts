import { z } from 'zod';
import type { PlanningConfig } from '../../../shared/config/schema.js';
import type { Task } from '../../../shared/domain/task.js';
import type { CallContext, DependencyResult, ModelReply } from '../../llm/types.js';
import type { ReflectionTrigger } from './policy.js';
import type { ToolSpec } from './tools/types.js';

/** Seed 004's planning-phase reply: goal understanding, decomposition, action plan. */
export const AgentPlan = z.object({
  goal_understanding: z.object({
    main_objective: z.string(),
    success_criteria: z.array(z.string()).default([]),
    constraints: z.array(z.string()).default([]),
  }),
  task_decomposition: z
    .object({
      reasoning: z.string().default(''),
      subtasks: z
        .array(
          z.object({
            id: z.string(),
            description: z.string(),
            dependencies: z.array(z.string()).default([]),
            complexity: z.enum(['low', 'medium', 'high']).default('medium'),
          }),
        )
        .default([]),
    })
    .prefault({}),
  action_plan: z
    .object({
      execution_order: z.array(z.string()).default([]),
      actions: z.array(z.unknown()).default([]),
    })
    .prefault({}),
  comment: z.string().optional(),
});
export type AgentPlan = z.infer<typeof AgentPlan>;

/** The execution phase: call a tool, or say the task is done. */
export const AgentDecision = z.union([
  z.object({
    done: z.literal(true),
    summary: z.string(),
  }),
  z.object({
    tool: z.string().min(1),
    input: z.record(z.string(), z.unknown()).default({}),
  }),
]);
export type AgentDecision = z.infer<typeof AgentDecision>;

/** A revision the model proposes: why, what changes, and optionally the whole new plan. */
export const PlanRevision = z.object({
  reason: z.string(),
  changes: z.array(z.unknown()).default([]),
  plan: AgentPlan.optional(),
});
export type PlanRevision = z.infer<typeof PlanRevision>;

/** Seed 004's reflection-phase reply. */
export const AgentReflection = z.object({
  status: z.enum(['success', 'failure', 'partial']),
  evaluation: z.string(),
  plan_revision_needed: z.boolean(),
  plan_revision: PlanRevision.optional(),
});
export type AgentReflection = z.infer<typeof AgentReflection>;

/** One step of the run so far, as the model sees it. */
export type AgentTurn =
  | { kind: 'action'; step: number; tool: string; input: unknown; output?: string; error?: string }
  | { kind: 'reflection'; step: number; reflection: AgentReflection; trigger?: string }
  | { kind: 'revision'; step: number; reason: string; changes: unknown[] };

/** What every agent-model call knows about the run. */
export interface AgentRunRequest extends CallContext {
  task: Task;
  instruction: string;
  attempt: number;
  dependencyResults: DependencyResult[];
  feedback?: string;
  /** The task as a prompt (see prompt.ts). */
  prompt: string;
  tools: ToolSpec[];
  planning: PlanningConfig;
}

export interface AgentActRequest extends AgentRunRequest {
  /** Undefined in legacy mode (planning disabled). */
  plan?: AgentPlan;
  transcript: AgentTurn[];
  actionsLeft: number;
}

export interface AgentReflectRequest extends AgentActRequest {
  trigger: ReflectionTrigger;
  /** Revisions still allowed; a revision asked for when none is left is not applied. */
  revisionsLeft: number;
}

/**
 * The model side of the agent executor. The builtin provider implements it with fixed rules,
 * tests with a script (scripted-model.ts), and real LLMs through function calling.
 */
export interface AgentModel {
  readonly label: string;
  plan(request: AgentRunRequest): Promise<ModelReply<AgentPlan>>;
  nextAction(request: AgentActRequest): Promise<ModelReply<AgentDecision>>;
  reflect(request: AgentReflectRequest): Promise<ModelReply<AgentReflection>>;
}

export const actionCount = (transcript: readonly AgentTurn[]): number =>
  transcript.filter((t) => t.kind === 'action').length;
export const reflectionCount = (transcript: readonly AgentTurn[]): number =>
  transcript.filter((t) => t.kind === 'reflection').length;
