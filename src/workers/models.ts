import type { LlmConfig, LlmRoleConfig } from '../shared/config/schema.js';
import type { Session } from '../shared/domain/session.js';
import { OrqError } from '../shared/errors.js';
import { createBuiltinModels } from '../shared/llm/builtin.js';
import { loadScenarioFile } from '../shared/llm/scenario.js';
import type { RoleModels } from '../shared/llm/types.js';

export type ModelRole = 'planner' | 'judge' | 'worker' | 'replanner';

export function roleConfig(llm: LlmConfig, role: ModelRole): LlmRoleConfig {
  return { ...llm.default, ...(llm[role] ?? {}) } as LlmRoleConfig;
}

/**
 * Resolves the models a role uses for a session: the session's own llm config decides the
 * provider (so one cluster can serve sessions with different scenarios or providers).
 */
export class ModelResolver {
  private readonly builtinByScenario = new Map<string, Promise<RoleModels>>();

  constructor(private readonly options: { latencyMs?: number; override?: RoleModels } = {}) {}

  async forSession(session: Session, role: ModelRole): Promise<RoleModels> {
    if (this.options.override) return this.options.override;
    const cfg = roleConfig(session.config.llm, role);
    if (cfg.provider !== 'builtin') {
      throw new OrqError(
        'LLM_CALL_FAILED',
        `provider ${cfg.provider} is not available in this build`,
        {
          hint: 'Use provider "builtin" (deterministic, offline) until the real providers land.',
          details: { sessionId: session.id, role },
        },
      );
    }
    const scenarioPath = session.config.llm.scenario ?? '';
    let models = this.builtinByScenario.get(scenarioPath);
    if (!models) {
      const latency = this.options.latencyMs;
      models = (async () =>
        createBuiltinModels({
          ...(scenarioPath ? { scenario: await loadScenarioFile(scenarioPath) } : {}),
          ...(latency !== undefined ? { latencyMs: latency } : {}),
        }))();
      // A scenario that fails to load is reported on every call, not cached as a rejection.
      models.catch(() => this.builtinByScenario.delete(scenarioPath));
      this.builtinByScenario.set(scenarioPath, models);
    }
    return models;
  }
}
