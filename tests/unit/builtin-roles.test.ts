import { describe, expect, it } from 'vitest';
import { LlmConfig } from '../../src/shared/config/schema.js';
import { builtinNote, builtinUse } from '../../src/shared/config/builtin-roles.js';

const use = (llm: object) => builtinUse({ llm: LlmConfig.parse(llm) });

describe('which roles of a session the builtin provider played', () => {
  it('is every role when no provider is configured', () => {
    expect(use({})).toEqual({
      ranByBuiltin: true,
      builtinRoles: ['planner', 'judge', 'worker', 'replanner'],
    });
  });

  it('is every role of a scenario-scripted run', () => {
    expect(use({ scenario: '/x/blocked-task.yaml' }).ranByBuiltin).toBe(true);
  });

  it('is none when a model plays every role', () => {
    expect(use({ default: { provider: 'anthropic', model: 'claude-sonnet-5-5' } })).toEqual({
      ranByBuiltin: false,
      builtinRoles: [],
    });
  });

  it('is the roles left on builtin when only some name a model', () => {
    expect(use({ planner: { provider: 'openai', model: 'gpt-4o-mini' } })).toEqual({
      ranByBuiltin: true,
      builtinRoles: ['judge', 'worker', 'replanner'],
    });
  });
});

describe('the sentence a reader of a session gets', () => {
  it('says no model ran it when the builtin provider played every role', () => {
    expect(builtinNote(['planner', 'judge', 'worker', 'replanner'])).toBe(
      'No model ran this session: the builtin provider (a rule set, not an LLM) planned, judged and executed it. See docs/providers.md to use a model.',
    );
  });

  it('names the roles it played when a model played the others', () => {
    expect(builtinNote(['judge', 'worker'])).toBe(
      'The builtin provider (a rule set, not an LLM) played the judge and worker of this session, not a model.',
    );
  });

  it('is nothing when a model played every role', () => {
    expect(builtinNote([])).toBeUndefined();
  });
});
