import type { PlanBreakdown } from '../domain/plan.js';
import type {
  RequiredTerms,
  StructureValidation,
  TermPreservationResult,
} from '../domain/refinement.js';
import type { RefinementConfig } from '../config/schema.js';
import { taskCapProblem, validateStructure } from './structure.js';
import { validateTermPreservation } from './terms.js';

export interface PlanEditInput {
  /** The plan that waits for approval. */
  waiting: PlanBreakdown;
  /** The plan a person wants to run instead. */
  edited: PlanBreakdown;
  config: RefinementConfig;
  requiredTerms: RequiredTerms;
  /** budget.maxTasks. */
  maxTasks: number;
  /** The person said to run it even though it drops required terms. */
  allowTermLoss: boolean;
}

export interface PlanEditCheck {
  accepted: boolean;
  /** Why it is refused, one sentence each (empty when accepted). */
  problems: string[];
  structure: StructureValidation;
  /** Over the required terms; absent when the term check is off. */
  termPreservation?: TermPreservationResult;
  /** Required terms the edit drops (run anyway only with allowTermLoss). */
  droppedTerms: string[];
}

/**
 * Whether a person's edit of a waiting plan may run (issue 48). It passes the rules a replan
 * passes against the plan it replaces (seed 000: task count change, ids, dependencies, cycles)
 * and budget.maxTasks. Seed 002's terms are stricter here: any required term the edit drops
 * refuses it, unless the edit says so explicitly (allowTermLoss), since a person removing a task
 * by mistake is the loss the rule exists for, and one removing it on purpose can say so.
 */
export function checkPlanEdit(input: PlanEditInput): PlanEditCheck {
  const { config } = input;
  // Terms are judged below, on their own rule: the structure check sees none.
  const structure = validateStructure(input.waiting.tasks, input.edited.tasks, config);
  const problems = [...structure.problems];
  const tooMany = taskCapProblem({
    held: 0,
    added: input.edited.tasks.length,
    maxTasks: input.maxTasks,
  });
  if (tooMany) problems.push(tooMany);
  const termPreservation = config.enableTermPreservationCheck
    ? validateTermPreservation(input.requiredTerms, input.edited.tasks, config)
    : undefined;
  const droppedTerms = termPreservation?.missing ?? [];
  if (droppedTerms.length > 0 && !input.allowTermLoss) {
    problems.push(
      `The edited plan drops required terms of the instruction: ${droppedTerms.map((t) => `"${t}"`).join(', ')}. Keep them in a task's title, acceptance or context, or say allowTermLoss (orq edit --allow-term-loss) to run it anyway.`,
    );
  }
  return {
    accepted: problems.length === 0,
    problems,
    structure,
    ...(termPreservation ? { termPreservation } : {}),
    droppedTerms,
  };
}
