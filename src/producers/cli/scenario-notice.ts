import type { SessionConfig } from '../../shared/config/schema.js';
import { OrqError } from '../../shared/errors.js';
import { loadScenarioFile } from '../../shared/config/scenario.js';

/**
 * A submitted session's scenario file, checked where `orq submit` runs. Without REDIS_URL the
 * session's roles run on this machine (`--run`), so one that does not load is refused, as `orq
 * run` refuses it. With REDIS_URL the pods read the path themselves and may have a file this
 * machine lacks: the submit goes on, and the returned notice says what was found here.
 */
export function submittedScenarioNotice(
  config: SessionConfig,
  rolesElsewhere: boolean,
): string | undefined {
  if (!config.llm.scenario) return undefined;
  try {
    loadScenarioFile(config.llm.scenario);
    return undefined;
  } catch (error) {
    if (!rolesElsewhere || !(error instanceof OrqError)) throw error;
    return `orq: warning: ${error.summary}. Submitted anyway: the roles read the scenario where they run, so check that they have it at that path\n`;
  }
}
