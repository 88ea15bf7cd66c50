import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import { roleConfig } from '../../src/shared/config/roles.js';

/** An Ollama default, as docs/providers.md shows it, with a rate limit and longer timeouts. */
const ollama = {
  provider: 'openai',
  baseUrl: 'http://localhost:11434/v1',
  model: 'qwen2.5:14b-instruct',
  apiKeyEnv: 'OLLAMA_KEY',
  rateLimit: { maxConcurrent: 2 },
  timeoutSeconds: 600,
  maxRetries: 4,
};

describe('roleConfig', () => {
  it("a role that names another provider kind does not inherit the default's server, key, quota or model", () => {
    const { llm } = parseConfig({
      llm: { default: ollama, planner: { provider: 'anthropic', model: 'claude-sonnet-5-5' } },
    });
    const planner = roleConfig(llm, 'planner');
    expect(planner).toMatchObject({ provider: 'anthropic', model: 'claude-sonnet-5-5' });
    expect(planner.baseUrl).toBeUndefined();
    expect(planner.apiKeyEnv).toBeUndefined();
    expect(planner.rateLimit).toBeUndefined();
    // What is not the server's own still comes from the default.
    expect(planner).toMatchObject({ timeoutSeconds: 600, maxRetries: 4 });
  });

  it("a role that names another kind and no model gets none (the config refuses that), not the default's", () => {
    const { llm } = parseConfig({ llm: { default: ollama } });
    const planner = roleConfig({ ...llm, planner: { provider: 'anthropic' } }, 'planner');
    expect(planner.model).toBe('builtin');
  });

  it('a role of the same kind inherits everything it does not set', () => {
    const { llm } = parseConfig({
      llm: { default: ollama, worker: { provider: 'openai', model: 'qwen2.5-coder:32b' } },
    });
    expect(roleConfig(llm, 'worker')).toMatchObject({
      ...ollama,
      model: 'qwen2.5-coder:32b',
    });
    expect(roleConfig(llm, 'judge')).toMatchObject(ollama);
  });

  it("a role's own baseUrl and key variable are kept when it switches kind", () => {
    const { llm } = parseConfig({
      llm: {
        default: ollama,
        judge: {
          provider: 'anthropic',
          model: 'claude-haiku-4-5',
          baseUrl: 'https://gateway.example/anthropic',
          apiKeyEnv: 'GATEWAY_KEY',
        },
      },
    });
    expect(roleConfig(llm, 'judge')).toMatchObject({
      baseUrl: 'https://gateway.example/anthropic',
      apiKeyEnv: 'GATEWAY_KEY',
    });
  });
});
