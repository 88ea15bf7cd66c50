import type { TokenUsage } from '../../../shared/domain/task.js';
import type {
  AgentActRequest,
  AgentDecision,
  AgentModel,
  AgentPlan,
  AgentReflection,
  AgentReflectRequest,
  AgentRunRequest,
} from './types.js';

export const BUILTIN_AGENT_LABEL = 'builtin agent (deterministic rules, not an LLM)';

function usageOf(input: string, output: unknown): TokenUsage {
  return {
    inputTokens: Math.ceil(input.length / 4),
    outputTokens: Math.ceil(JSON.stringify(output).length / 4),
  };
}

/** The file the builtin agent writes its deliverable to. */
export const deliverableFile = (taskId: string) => `${taskId}.md`;

function deliverable(request: AgentRunRequest): string {
  return [`# ${request.task.title}`, '', request.prompt, ''].join('\n');
}

/** The builtin agent's steps, in order: look around, write the deliverable, read it back. */
function steps(
  request: AgentRunRequest,
): { id: string; tool: string; input: Record<string, unknown> }[] {
  const file = deliverableFile(request.task.id);
  return [
    { id: 'inspect', tool: 'list_files', input: { path: '.' } },
    { id: 'write', tool: 'write_file', input: { path: file, content: deliverable(request) } },
    { id: 'verify', tool: 'read_file', input: { path: file } },
  ];
}

/**
 * The agent model of the builtin provider: fixed rules, so `executor: agent` runs offline and
 * reproducibly. It plans three subtasks, does each through a workspace tool until it succeeds,
 * reflects honestly on failures and asks for a revision after one, and says done at the end.
 */
export function createBuiltinAgentModel(): AgentModel {
  return {
    label: BUILTIN_AGENT_LABEL,

    async plan(request) {
      const plan: AgentPlan = {
        goal_understanding: {
          main_objective: request.task.title,
          success_criteria: [request.task.acceptance],
          constraints: ['Work only inside the task workspace'],
        },
        task_decomposition: {
          reasoning:
            'See what the workspace holds, write the deliverable, then check it against the criteria.',
          subtasks: [
            {
              id: 'inspect',
              description: 'List the workspace files',
              dependencies: [],
              complexity: 'low',
            },
            {
              id: 'write',
              description: `Write ${deliverableFile(request.task.id)} with the result`,
              dependencies: ['inspect'],
              complexity: 'medium',
            },
            {
              id: 'verify',
              description: 'Read the deliverable back against the acceptance criteria',
              dependencies: ['write'],
              complexity: 'low',
            },
          ],
        },
        action_plan: {
          execution_order: ['inspect', 'write', 'verify'],
          actions: steps(request).map((s) => ({ subtask: s.id, tool: s.tool })),
        },
        comment: 'Plan complete',
      };
      return { value: plan, usage: usageOf(request.prompt, plan) };
    },

    async nextAction(request: AgentActRequest) {
      const succeeded = new Set(
        request.transcript.flatMap((t) =>
          t.kind === 'action' && t.error === undefined ? [t.tool] : [],
        ),
      );
      const next = steps(request).find((s) => !succeeded.has(s.tool));
      const decision: AgentDecision = next
        ? { tool: next.tool, input: next.input }
        : {
            done: true,
            summary: `Wrote ${deliverableFile(request.task.id)} for "${request.task.title}" and checked it against: ${request.task.acceptance}`,
          };
      return { value: decision, usage: usageOf(request.prompt, decision) };
    },

    async reflect(request: AgentReflectRequest) {
      const last = [...request.transcript].reverse().find((t) => t.kind === 'action');
      const failed = last?.kind === 'action' && last.error !== undefined;
      const reflection: AgentReflection = failed
        ? {
            status: 'failure',
            evaluation: `${last.tool} failed: ${last.error}`,
            plan_revision_needed: request.revisionsLeft > 0,
            plan_revision: {
              reason: `Recover from the failed ${last.tool}`,
              changes: [{ retry: last.tool }],
            },
          }
        : {
            status: 'success',
            evaluation: `${request.transcript.filter((t) => t.kind === 'action').length} action(s) so far, all on plan`,
            plan_revision_needed: false,
          };
      return { value: reflection, usage: usageOf(request.prompt, reflection) };
    },
  };
}
