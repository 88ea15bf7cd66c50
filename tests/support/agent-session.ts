import { join } from 'node:path';
import type { z } from 'zod';
import type { HistoryEntry } from '../../src/shared/domain/history.js';
import type { ApprovalConfig } from '../../src/shared/config/schema.js';
import type { ScenarioInput } from '../../src/shared/config/scenario.js';
import {
  createScriptedAgentModel,
  type AgentScript,
} from '../../src/workers/executors/agent/scripted-model.js';
import type { startCluster as StartCluster } from './cluster.js';
import { recordingModels } from './scenarios.js';

/**
 * A one-task session (task `push`) run by the agent executor with a scripted model, for the
 * tests of waits inside a running execution (issue 48): ask_human, approval.steps and their
 * timeouts. The plan and the judge accept at once.
 */

export const ONE_AGENT_TASK: ScenarioInput = {
  plans: [{ tasks: [{ id: 'push', title: 'Push the image', acceptance: 'pushed', context: 'c' }] }],
  planJudgements: [{ score: 90, isAcceptable: true }],
  tasks: { push: { judgements: [{ success: true, reason: 'pushed' }] } },
};

export async function submitAgentSession(
  startCluster: typeof StartCluster,
  options: {
    actions: AgentScript['actions'];
    /** A folder of the test's: each session's workspaces go in a folder of their own there. */
    workspaces: string;
    approval?: z.input<typeof ApprovalConfig>;
  },
) {
  const agent = createScriptedAgentModel({ actions: options.actions });
  const workspaceRoot = join(options.workspaces, Math.random().toString(36).slice(2));
  const c = await startCluster({
    models: recordingModels(ONE_AGENT_TASK).models,
    agentModel: () => agent,
    config: {
      execution: { defaultExecutor: 'agent', workspaceRoot },
      ...(options.approval ? { approval: options.approval } : {}),
    },
  });
  const { id } = await c.client.submit({ instruction: 'Push the image' });
  return { c, id, agent, workspaceRoot };
}

/** The history's wait entries: opened, answered, timed-out, cancelled. */
export const waitEntries = (all: HistoryEntry[]) =>
  all.filter((e): e is Extract<HistoryEntry, { type: 'wait' }> => e.type === 'wait');

/** The agent's action entries of tool `tool` that carry its outcome (not the awaiting one). */
export const toolResults = (all: HistoryEntry[], tool: string) =>
  all.filter(
    (e): e is Extract<HistoryEntry, { type: 'action' }> =>
      e.type === 'action' && e.tool === tool && (e.output !== undefined || e.error !== undefined),
  );
