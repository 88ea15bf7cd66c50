import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { LlmConfig } from '../../src/shared/config/schema.js';
import { modelsNotice, type ModelsNoticeInput } from '../../src/producers/cli/models-notice.js';

const notice = (
  llm: z.input<typeof LlmConfig>,
  rest: Partial<Omit<ModelsNoticeInput, 'llm'>> = {},
): string => modelsNotice({ llm: LlmConfig.parse(llm), audience: 'run', keysSet: [], ...rest });

const BUILTIN =
  'orq: no model configured: the builtin provider (a rule set, not an LLM) plans, judges and runs this; see docs/providers.md to use a model\n';

describe('the models line of orq run, orq start and orq dashboard', () => {
  it('says no model is configured when the builtin provider plays every role', () => {
    expect(notice({})).toBe(BUILTIN);
  });

  it('names the setting that would use OPENAI_API_KEY when it is set but no provider is', () => {
    expect(notice({}, { keysSet: ['OPENAI_API_KEY'] })).toBe(
      BUILTIN +
        'orq: OPENAI_API_KEY is set but unused: to use it, set ORQ__llm__default__provider=openai ORQ__llm__default__model=gpt-4o-mini (or llm.default in orq.config.yaml; docs/providers.md)\n',
    );
  });

  it('names one setting per key when both providers have one', () => {
    const lines = notice({}, { keysSet: ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY'] }).split('\n');
    expect(lines[1]).toContain('OPENAI_API_KEY is set but unused');
    expect(lines[2]).toBe(
      'orq: ANTHROPIC_API_KEY is set but unused: to use it, set ORQ__llm__default__provider=anthropic ORQ__llm__default__model=claude-sonnet-5-5 (or llm.default in orq.config.yaml; docs/providers.md)',
    );
  });

  it('names the scenario that scripts the builtin provider, relative to the working directory, and no key', () => {
    expect(
      notice(
        { scenario: '/repo/examples/scenarios/replan-task.yaml' },
        { cwd: '/repo', keysSet: ['OPENAI_API_KEY'] },
      ),
    ).toBe(
      'orq: no model configured: the builtin provider (a rule set, not an LLM), scripted by examples/scenarios/replan-task.yaml, plans, judges and runs this; see docs/providers.md to use a model\n',
    );
  });

  it('groups the roles that share a provider and model, and names the server without its password', () => {
    expect(
      notice(
        {
          default: { provider: 'openai', model: 'gpt-4o-mini' },
          planner: { provider: 'anthropic', model: 'claude-opus-5-5' },
          worker: { baseUrl: 'http://user:secret@gpu-box:8000/v1', model: 'qwen' },
        },
        { keysSet: ['OPENAI_API_KEY'] },
      ),
    ).toBe(
      'orq: models: planner: anthropic claude-opus-5-5; judge, replanner: openai gpt-4o-mini; worker: openai qwen at http://gpu-box:8000/v1\n',
    );
  });

  it('marks the roles a model does not play when only some do', () => {
    expect(
      notice({
        default: { provider: 'openai', model: 'gpt-4o-mini' },
        worker: { provider: 'builtin' },
      }),
    ).toBe(
      'orq: models: planner, judge, replanner: openai gpt-4o-mini; worker: builtin (a rule set, not an LLM)\n',
    );
  });

  it('says a replayed run calls no model', () => {
    expect(
      notice({
        default: { provider: 'openai', model: 'gpt-4o-mini' },
        record: { mode: 'replay', path: 'recordings/login' },
      }),
    ).toBe(
      'orq: models: planner, judge, worker, replanner: openai gpt-4o-mini; replayed from recordings/login: no model is called\n',
    );
  });

  it("speaks of a pod's roles only, for the sessions submitted with its config", () => {
    expect(notice({}, { audience: 'pod', roles: ['worker'] })).toBe(
      "orq: no model configured: the builtin provider (a rule set, not an LLM) runs the sessions submitted with this config (a session's own llm settings decide); see docs/providers.md to use a model\n",
    );
    expect(
      notice(
        { default: { provider: 'openai', model: 'gpt-4o-mini' } },
        { audience: 'pod', roles: ['planner', 'coordinator'] },
      ),
    ).toBe(
      "orq: models of the sessions submitted with this config (a session's own llm settings decide): planner: openai gpt-4o-mini\n",
    );
  });

  it('says nothing for a pod that runs no model role', () => {
    expect(
      notice({}, { audience: 'pod', roles: ['coordinator'], keysSet: ['OPENAI_API_KEY'] }),
    ).toBe('');
  });

  it("speaks of the dashboard's submitted sessions", () => {
    expect(notice({}, { audience: 'dashboard' })).toBe(
      'orq: no model configured: the builtin provider (a rule set, not an LLM) plans, judges and runs the sessions submitted here; see docs/providers.md to use a model\n',
    );
  });
});
