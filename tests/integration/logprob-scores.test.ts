import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import { createLlmModels } from '../../src/workers/llm/llm-models.js';
import { sessionRoleConfigs } from '../../src/shared/config/roles.js';
import type { PlanJudgeRequest } from '../../src/workers/llm/types.js';
import { startFakeLlmServer, type FakeLlmServer } from '../support/fake-llm-server.js';

/**
 * Probability-weighted plan scores (issue 38) through the OpenAI SDK against a local server that
 * returns token log-probabilities as OpenAI and vLLM do, and against one that returns none.
 */

let server: FakeLlmServer;
const judgement = { score: 72, isAcceptable: true, issues: [], suggestions: [] };

beforeAll(async () => {
  server = await startFakeLlmServer('openai', (request) =>
    request.text.includes('[no logprobs]')
      ? { json: judgement }
      : { json: judgement, scoreLogprobs: { '72': Math.log(0.6), '80': Math.log(0.4) } },
  );
});

afterAll(async () => {
  await server?.close();
});

function judge(logprobScores: boolean) {
  const config = parseConfig({
    llm: { default: { provider: 'openai', model: 'judge-test', baseUrl: server.baseUrl } },
  });
  return createLlmModels(sessionRoleConfigs(config), {
    maxRepairAttempts: 0,
    env: { OPENAI_API_KEY: 'sk-orq-test' },
    logprobScores,
  });
}

function request(instruction: string): PlanJudgeRequest {
  return {
    sessionId: 'logprobs',
    instruction,
    attempt: 0,
    requiredTerms: [],
    plan: {
      summary: '',
      tasks: [
        {
          id: 't1',
          title: 'Write the parser',
          acceptance: 'parses the sample',
          context: '',
          scopePaths: [],
          dependencies: [],
        },
      ],
    },
  };
}

describe('probability-weighted plan scores', () => {
  it('score the expected value over the score token in one call, asking for logprobs', async () => {
    const before = server.requests.length;
    const reply = await judge(true).judgePlan(request('Write the parser'));
    expect(server.requests.length - before).toBe(1);
    const sent = server.requests.at(-1)?.body;
    expect(sent).toMatchObject({ logprobs: true, top_logprobs: 20 });
    // 0.6 × 72 + 0.4 × 80
    expect(reply.value.score).toBeCloseTo(75.2, 5);
    expect(reply.value.scoreWeighting).toEqual({ stated: 72, mass: expect.closeTo(1, 5) });
  });

  it('keep the stated score where the server returns no logprobs', async () => {
    const reply = await judge(true).judgePlan(request('Write the parser [no logprobs]'));
    expect(server.requests.at(-1)?.body).toMatchObject({ logprobs: true });
    expect(reply.value.score).toBe(72);
    expect(reply.value.scoreWeighting).toBeUndefined();
  });

  it('ask for no logprobs when off', async () => {
    const reply = await judge(false).judgePlan(request('Write the parser'));
    expect(server.requests.at(-1)?.body).not.toHaveProperty('logprobs');
    expect(reply.value.score).toBe(72);
  });
});
