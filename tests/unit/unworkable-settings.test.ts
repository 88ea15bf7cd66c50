import { describe, expect, it } from 'vitest';
import { sessionConfig } from '../../src/producers/client.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { SessionConfig } from '../../src/shared/config/schema.js';
import { unsubmittableSettings, unworkableSettings } from '../../src/shared/config/unworkable.js';
import { ConfigError, ValidationError } from '../../src/shared/errors.js';

const paths = (input: unknown) => unworkableSettings(SessionConfig.parse(input)).map((i) => i.path);

describe('unworkableSettings', () => {
  it('finds nothing wrong with the defaults (the builtin provider)', () => {
    expect(paths({})).toEqual([]);
    // The builtin provider ignores the model name.
    expect(paths({ llm: { default: { model: 'gpt-4o' } } })).toEqual([]);
  });

  it('names llm.default.model when a real provider is given no model', () => {
    expect(paths({ llm: { default: { provider: 'openai' } } })).toEqual(['llm.default.model']);
    expect(paths({ llm: { default: { provider: 'anthropic', baseUrl: 'http://x' } } })).toEqual([
      'llm.default.model',
    ]);
    const [issue] = unworkableSettings(
      SessionConfig.parse({ llm: { default: { provider: 'anthropic' } } }),
    );
    expect(issue?.message).toContain('provider anthropic needs a model name');
  });

  it("names the role's own model when the role chose the provider", () => {
    expect(paths({ llm: { judge: { provider: 'anthropic' } } })).toEqual(['llm.judge.model']);
    // The default's model is another provider's: an OpenAI model name means nothing to Anthropic.
    expect(
      paths({
        llm: { default: { provider: 'openai', model: 'm' }, judge: { provider: 'anthropic' } },
      }),
    ).toEqual(['llm.judge.model']);
    expect(paths({ llm: { judge: { provider: 'openai', model: 'builtin' } } })).toEqual([
      'llm.judge.model',
    ]);
  });

  it('accepts a real provider whose every role has a model, from the role or the default', () => {
    expect(paths({ llm: { default: { provider: 'openai', model: 'gpt-4o-mini' } } })).toEqual([]);
    expect(
      paths({
        llm: { default: { provider: 'openai', model: 'm' }, judge: { provider: 'openai' } },
      }),
    ).toEqual([]);
    const everyRole = Object.fromEntries(
      ['planner', 'judge', 'worker', 'replanner'].map((role) => [role, { model: `${role}-model` }]),
    );
    expect(paths({ llm: { default: { provider: 'openai' }, ...everyRole } })).toEqual([]);
    // One role left on the default model is enough to need one.
    const { replanner: _left, ...threeRoles } = everyRole;
    expect(paths({ llm: { default: { provider: 'openai' }, ...threeRoles } })).toEqual([
      'llm.default.model',
    ]);
  });

  it("names budget.maxTokens below one call's reservation, not at it", () => {
    expect(paths({ budget: { maxTokens: 3999 } })).toEqual(['budget.maxTokens']);
    expect(paths({ budget: { maxTokens: 4000 } })).toEqual([]);
    expect(paths({ budget: { maxTokens: 100, reserveTokensPerCall: 100 } })).toEqual([]);
    expect(paths({ budget: { maxTokens: 100, reserveTokensPerCall: 101 } })).toEqual([
      'budget.maxTokens',
    ]);
  });

  it('names budget.maxTokens below the output limit a role reserves with every call', () => {
    // Anthropic always sends max_tokens (8192 unset): a call reserves at least that.
    const anthropic = { provider: 'anthropic', model: 'claude-sonnet-4-5' };
    const [issue] = unworkableSettings(
      SessionConfig.parse({ llm: { default: anthropic }, budget: { maxTokens: 8000 } }),
    );
    expect(issue).toMatchObject({ path: 'budget.maxTokens' });
    expect(issue?.message).toMatch(/output limit, 16384 tokens.*llm\.planner\.maxOutputTokens/);
    expect(
      paths({
        llm: { default: { ...anthropic, maxOutputTokens: 1000 } },
        budget: { maxTokens: 8000 },
      }),
    ).toEqual([]);
    // OpenAI sends no limit unless set: reserveTokensPerCall stands for it.
    const openai = { provider: 'openai', model: 'gpt-4o-mini' };
    expect(paths({ llm: { default: openai }, budget: { maxTokens: 3000 } })).toEqual([
      'budget.maxTokens',
    ]);
    expect(
      paths({
        llm: { default: openai, worker: { maxOutputTokens: 5000 } },
        budget: { maxTokens: 4500 },
      }),
    ).toEqual(['budget.maxTokens']);
  });
});

describe('unsubmittableSettings', () => {
  const issues = (input: unknown) => unsubmittableSettings(SessionConfig.parse(input));
  const openai = { default: { provider: 'openai', model: 'gpt-4o-mini' } };

  it('names budget.prices when maxUsd has no price for a model the roles use', () => {
    expect(issues({ llm: openai, budget: { maxUsd: 1 } })).toEqual([
      {
        path: 'budget.prices',
        message: 'maxUsd needs a price for every model the roles use; none for gpt-4o-mini',
        settings: ['budget.maxUsd'],
      },
    ]);
    const price = { inputPerMTok: 1, outputPerMTok: 2 };
    expect(
      issues({ llm: openai, budget: { maxUsd: 1, prices: { 'gpt-4o-mini': price } } }),
    ).toEqual([]);
    // Without maxUsd no price is needed; the builtin provider is free.
    expect(issues({ llm: openai })).toEqual([]);
    expect(issues({ budget: { maxUsd: 1 } })).toEqual([]);
  });

  it('holds the unworkable settings, and then no price is asked of a model they refuse', () => {
    const llm = { default: { provider: 'openai' } };
    expect(issues({ llm, budget: { maxUsd: 1 } }).map((i) => i.path)).toEqual([
      'llm.default.model',
    ]);
  });
});

describe('where unworkable settings are refused', () => {
  it('in a config file, naming the file and the setting', () => {
    const error = (() => {
      try {
        parseConfig({ llm: { default: { provider: 'openai' } } }, 'orq.config.yaml');
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).message).toContain('orq.config.yaml');
    expect((error as ConfigError).message).toContain('llm.default.model');
  });

  it("in a submit's config, under config.", () => {
    const base = parseConfig({});
    expect(() => sessionConfig(base, { budget: { maxTokens: 10 } })).toThrow(ValidationError);
    try {
      sessionConfig(base, { llm: { worker: { provider: 'openai' } }, budget: { maxTokens: 10 } });
    } catch (e) {
      expect((e as ValidationError).issues.map((i) => i.path)).toEqual([
        'config.llm.worker.model',
        'config.budget.maxTokens',
      ]);
    }
    expect.assertions(2);
  });
});

describe('a submit and `orq config check` refuse the same settings', () => {
  it('a maxUsd budget with an unpriced model, under config. in a submit', () => {
    const base = parseConfig({ llm: { default: { provider: 'openai', model: 'gpt-4o-mini' } } });
    expect(() => sessionConfig(base, { budget: { maxUsd: 1 } })).toThrow(
      'Invalid submit request: config.budget.prices: maxUsd needs a price for every model the roles use; none for gpt-4o-mini',
    );
    try {
      sessionConfig(base, { budget: { maxUsd: 1 } });
    } catch (e) {
      expect((e as ValidationError).issues[0]?.settings).toEqual(['config.budget.maxUsd']);
    }
    expect.assertions(2);
  });
});
