import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { parseConfig } from '../../src/shared/config/load.js';
import {
  overridePaths,
  overridesOutside,
  SAFE_SESSION_OVERRIDES,
} from '../../src/shared/config/override-policy.js';
import { SessionConfig } from '../../src/shared/config/schema.js';
import { ConfigError } from '../../src/shared/errors.js';

describe('overridePaths', () => {
  it('walks objects and takes arrays and scalars as one value each', () => {
    expect(
      overridePaths({
        refinement: { noiseThreshold: 3 },
        execution: { command: { template: ['a', 'b'], checks: [] } },
        llm: { judge: { model: 'm' }, scenario: 's' },
      }),
    ).toEqual([
      ['refinement', 'noiseThreshold'],
      ['execution', 'command', 'template'],
      ['execution', 'command', 'checks'],
      ['llm', 'judge', 'model'],
      ['llm', 'scenario'],
    ]);
  });

  it('finds nothing to set in an empty or missing config', () => {
    expect(overridePaths({})).toEqual([]);
    expect(overridePaths(undefined)).toEqual([]);
    expect(overridePaths({ execution: {} })).toEqual([]);
  });
});

describe('overridesOutside', () => {
  it('lets a pattern cover everything under it', () => {
    expect(
      overridesOutside({ budget: { prices: { m: { inputPerMTok: 1 } } } }, ['budget']),
    ).toEqual([]);
    expect(overridesOutside({ budget: { maxTokens: 5 } }, ['budget.maxUsd'])).toEqual([
      'budget.maxTokens',
    ]);
  });

  it('reads * as any one key, not as any depth', () => {
    const allowed = ['llm.*.model'];
    expect(
      overridesOutside({ llm: { default: { model: 'a' }, judge: { model: 'b' } } }, allowed),
    ).toEqual([]);
    expect(overridesOutside({ llm: { judge: { baseUrl: 'http://x' } } }, allowed)).toEqual([
      'llm.judge.baseUrl',
    ]);
    expect(overridesOutside({ llm: { scenario: 's' } }, allowed)).toEqual(['llm.scenario']);
    expect(overridesOutside({ anything: { at: { all: 1 } } }, ['*'])).toEqual([]);
  });

  it('does not take a pattern longer than the path as covering it', () => {
    // Setting all of execution.command would set its template too.
    expect(
      overridesOutside({ execution: { command: 'x' } }, ['execution.command.timeoutSeconds']),
    ).toEqual(['execution.command']);
  });

  it('allows nothing with no patterns, and anything with no overrides', () => {
    expect(overridesOutside({ refinement: { noiseThreshold: 1 } }, [])).toEqual([
      'refinement.noiseThreshold',
    ]);
    expect(overridesOutside(undefined, [])).toEqual([]);
  });
});

describe('SAFE_SESSION_OVERRIDES', () => {
  const safe = (overrides: unknown) => overridesOutside(overrides, SAFE_SESSION_OVERRIDES);

  it.each([
    ['execution.command', { execution: { command: { template: ['sh'], repository: '.' } } }],
    [
      'execution.mcpServers',
      { execution: { mcpServers: [{ name: 'x', transport: 'stdio', command: 'sh' }] } },
    ],
    ['execution.commandAllowlist', { execution: { commandAllowlist: ['bash'] } }],
    ['execution.workspaceRoot', { execution: { workspaceRoot: '/etc' } }],
    ['execution.defaultExecutor', { execution: { defaultExecutor: 'agent' } }],
    ['execution.taskExecutors', { execution: { taskExecutors: ['agent'] } }],
    ['llm.default.baseUrl', { llm: { default: { baseUrl: 'http://x' } } }],
    ['llm.worker.apiKeyEnv', { llm: { worker: { apiKeyEnv: 'AWS_SECRET_ACCESS_KEY' } } }],
    ['llm.scenario', { llm: { scenario: '/etc/passwd' } }],
    ['llm.record', { llm: { record: { mode: 'record', path: '/tmp' } } }],
    ['planning.history', { planning: { history: { storage_type: 'jsonl', directory: '/' } } }],
  ])('refuses %s: it names or picks a program, file, endpoint or variable', (_name, overrides) => {
    expect(safe(overrides)).not.toEqual([]);
  });

  it("refuses budget.maxTasks: it bounds how long one script holds the operator's Redis", () => {
    expect(safe({ budget: { maxTasks: 100_000 } })).toEqual(['budget.maxTasks']);
  });

  it('allows what shapes planning, judging, retries and spending', () => {
    expect(
      safe({
        refinement: { noiseThreshold: 3, maxQualityRetries: 2 },
        replanning: { maxIterations: 1 },
        planning: {
          max_subtasks: 5,
          reflection: { enabled: false },
          revision: { max_revisions: 1 },
        },
        execution: { maxContinuations: 1, maxAgentActions: 3 },
        llm: {
          default: { provider: 'openai', model: 'm', temperature: 0.2, maxOutputTokens: 100 },
          judge: { model: 'j', structuredOutput: 'json' },
          maxRepairAttempts: 2,
          judgeSamples: { k: 3 },
        },
        budget: { maxTokens: 1000, maxUsd: 2, reserveTokensPerCall: 500, prices: {} },
      }),
    ).toEqual([]);
  });

  it('names only settings the session config has (a typo would allow nothing)', () => {
    const schema = z.toJSONSchema(SessionConfig, { io: 'input' }) as JsonSchema;
    for (const pattern of SAFE_SESSION_OVERRIDES) {
      expect(matchesSchema(schema, pattern.split('.')), pattern).toBe(true);
    }
  });
});

describe('http.sessionOverrides', () => {
  it('defaults to the safe list and refuses a pattern that names no session setting', () => {
    expect(parseConfig({}).http.sessionOverrides).toEqual(SAFE_SESSION_OVERRIDES);
    expect(parseConfig({ http: { sessionOverrides: ['*'] } }).http.sessionOverrides).toEqual(['*']);
    for (const bad of ['redis.url', 'llm..model', 'llm.*.', '']) {
      expect(() => parseConfig({ http: { sessionOverrides: [bad] } }), bad).toThrow(ConfigError);
    }
  });
});

interface JsonSchema {
  properties?: Record<string, JsonSchema>;
  anyOf?: JsonSchema[];
}

/** Whether some property path of `schema` matches the pattern's segments (* for any key). */
function matchesSchema(schema: JsonSchema, segments: string[]): boolean {
  if (segments.length === 0) return true;
  const [head, ...rest] = segments as [string, ...string[]];
  const branches = [schema, ...(schema.anyOf ?? [])];
  return branches.some((branch) =>
    Object.entries(branch.properties ?? {}).some(
      ([key, child]) => (head === '*' || head === key) && matchesSchema(child, rest),
    ),
  );
}
