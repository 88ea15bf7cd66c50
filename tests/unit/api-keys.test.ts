import { describe, expect, it } from 'vitest';
import { SessionConfig } from '../../src/shared/config/schema.js';
import { OrqError } from '../../src/shared/errors.js';
import { requireApiKeys } from '../../src/workers/models.js';

const config = (llm: Record<string, unknown>) => SessionConfig.parse({ llm });

/** The error requireApiKeys throws, or undefined when it passes. */
function refusal(llm: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): OrqError | undefined {
  try {
    requireApiKeys(config(llm), env);
    return undefined;
  } catch (error) {
    if (error instanceof OrqError) return error;
    throw error;
  }
}

describe('requireApiKeys (orq run refuses a session no role of it could call)', () => {
  it('passes the builtin provider, which needs no key', () => {
    expect(refusal({})).toBeUndefined();
  });

  it('names the first role without a key and the variable to set', () => {
    const error = refusal({ default: { provider: 'openai', model: 'gpt-4o-mini' } });
    expect(error?.code).toBe('CONFIG_INVALID');
    expect(error?.message).toContain('planner');
    expect(error?.message).toContain('OPENAI_API_KEY');
  });

  it('checks each role with its own provider and key variable', () => {
    const llm = {
      default: { provider: 'openai', model: 'gpt-4o-mini' },
      judge: { provider: 'anthropic', model: 'claude-x', apiKeyEnv: 'JUDGE_KEY' },
    };
    expect(refusal(llm, { OPENAI_API_KEY: 'k' })?.message).toContain('JUDGE_KEY');
    expect(refusal(llm, { OPENAI_API_KEY: 'k', JUDGE_KEY: 'j' })).toBeUndefined();
    // Only the judge on a real provider: the others need nothing.
    expect(refusal({ judge: llm.judge })?.message).toMatch(/judge model \(anthropic\)/);
  });

  it('passes a local server (baseUrl) with no apiKeyEnv, and a replayed recording', () => {
    const local = { provider: 'openai', model: 'llama3', baseUrl: 'http://127.0.0.1:11434/v1' };
    expect(refusal({ default: local })).toBeUndefined();
    const replay = { provider: 'anthropic', model: 'claude-x' };
    expect(refusal({ default: replay, record: { mode: 'replay' } })).toBeUndefined();
    // Recording calls the model, so it needs the key.
    expect(refusal({ default: replay, record: { mode: 'record' } })?.message).toContain(
      'ANTHROPIC_API_KEY',
    );
  });
});
