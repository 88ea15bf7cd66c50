import { describe, expect, it } from 'vitest';
import { sessionConfig } from '../../src/producers/client.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { SessionConfig } from '../../src/shared/config/schema.js';

// A setting in the config file must reach the sessions a client submits, for every part of
// SessionConfig: judging and scheduling once did not, so orq.yaml's values were silently dropped.
describe('sessionConfig carries the client config into the session', () => {
  const base = parseConfig(
    {
      judging: { checkAlreadySatisfied: true },
      scheduling: { maxTasksInFlight: 3 },
      refinement: { maxRefinementAttempts: 2 },
      integration: { maxResolutionRounds: 1 },
    },
    'test config',
  );

  it('keeps every part of the config file that travels with a session', () => {
    const config = sessionConfig(base, undefined);
    expect(config.judging.checkAlreadySatisfied).toBe(true);
    expect(config.scheduling.maxTasksInFlight).toBe(3);
    expect(config.refinement.maxRefinementAttempts).toBe(2);
    expect(config.integration.maxResolutionRounds).toBe(1);
  });

  it('takes every key of SessionConfig from the client config, none left behind', () => {
    const config = sessionConfig(base, undefined);
    for (const key of Object.keys(SessionConfig.shape) as (keyof SessionConfig)[]) {
      expect(config[key], key).toEqual(base[key]);
    }
  });

  it("lets a submit's overrides win over the config file", () => {
    const config = sessionConfig(base, { scheduling: { maxTasksInFlight: 5 } });
    expect(config.scheduling.maxTasksInFlight).toBe(5);
    expect(config.judging.checkAlreadySatisfied).toBe(true);
  });
});
