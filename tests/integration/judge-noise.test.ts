import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import { AdaptiveJudgingConfig } from '../../src/shared/config/schema.js';
import { createBuiltinModels } from '../../src/workers/llm/builtin.js';
import { adaptiveJudge } from '../../src/workers/llm/sampled-judge.js';
import { parseScenario } from '../../src/shared/config/scenario.js';
import type { RoleModels } from '../../src/workers/llm/types.js';
import { PLAN_JUDGE_REQUEST } from '../support/judge-requests.js';
import { spreadOf } from '../../src/shared/rules/adaptive-judging.js';
import { JudgeNoiseStore } from '../../src/shared/store/judge-noise-store.js';
import { judgeIdentity, ModelResolver } from '../../src/workers/models.js';
import { makeSession } from '../support/executors.js';

/** Adaptive judging's memory of each judge's noise (issue 38), on the test Redis. */

const connections: Redis[] = [];
const prefix = `jn${randomUUID().slice(0, 8)}`;

beforeAll(() => {
  for (let i = 0; i < 2; i += 1) connections.push(new Redis(inject('redisUrl')));
});
afterAll(() => {
  for (const c of connections) c.disconnect();
});

const store = (i = 0) => new JudgeNoiseStore(connections[i] as Redis, prefix);
const judge = () => `openai/gpt-test-${randomUUID().slice(0, 8)}`;

const refinement = parseConfig({}).refinement;
const settings = AdaptiveJudgingConfig.parse({});
const request = PLAN_JUDGE_REQUEST;

/** A judge that scores the first plan with `scores` in turn (the last repeating). */
function judgeScoring(scores: number[]): RoleModels {
  return createBuiltinModels({
    scenario: parseScenario({
      planJudgements: [scores.map((score) => ({ score, isAcceptable: score >= 70 }))],
    }),
  });
}

describe('JudgeNoiseStore', () => {
  it('adds up each judge’s spread, for every pod, and keeps judges apart', async () => {
    const a = judge();
    const b = judge();
    expect(await store().read(a)).toBeUndefined();
    await store(0).add(a, spreadOf([70, 74]));
    await store(1).add(a, spreadOf([60, 61, 62]));
    await store(1).add(b, { sumSquares: 50, degrees: 5 });
    // A plan judged once has no spread to add.
    await store(0).add(a, spreadOf([90]));
    expect(await store(1).read(a)).toEqual({ sumSquares: 10, degrees: 3 });
    expect(await store(0).read(b)).toEqual({ sumSquares: 50, degrees: 5 });
  });
});

describe('adaptive judging with a learned noise', () => {
  it('asks a judge known to be consistent once where priorSigma alone would ask again', async () => {
    const memory = store();
    const quiet = judge();
    // 40 earlier repeats with a mean square of 1: σ learned ≈ 1.8 with priorSigma's weight.
    await memory.add(quiet, { sumSquares: 40, degrees: 40 });

    const alone = await adaptiveJudge(judgeScoring([75, 75]), settings, refinement).judgePlan(
      request,
    );
    expect(alone.value.samples).toEqual([75, 75]);
    expect(alone.value.adaptive?.prior).toEqual({ sigma: settings.priorSigma, learnedFrom: 0 });

    const learned = await adaptiveJudge(judgeScoring([75, 75]), settings, refinement, {
      memory,
      judge: quiet,
    }).judgePlan(request);
    expect(learned.value.samples).toEqual([75]);
    expect(learned.value.adaptive?.prior?.learnedFrom).toBe(40);
    expect(learned.value.adaptive?.prior?.sigma).toBeCloseTo(
      Math.sqrt((2 * 7.5 ** 2 + 40) / 42),
      1,
    );
    expect(learned.value.adaptive?.stopped).toMatch(
      /learned from 40 repeated calls on earlier plans\): no line that changes the decision/,
    );
  });

  it("adds each plan's repeated scores to the judge's memory, and nothing with learnNoise off", async () => {
    const memory = store();
    const fresh = judge();
    const models = judgeScoring([72, 66, 78, 77]);
    const reply = await adaptiveJudge(models, settings, refinement, {
      memory,
      judge: fresh,
    }).judgePlan(request);
    expect(reply.value.samples).toEqual([72, 66, 78, 77]);
    expect(await memory.read(fresh)).toEqual(spreadOf([72, 66, 78, 77]));

    const off = judge();
    await adaptiveJudge(
      judgeScoring([72, 66, 78, 77]),
      { ...settings, learnNoise: false },
      refinement,
      {
        memory,
        judge: off,
      },
    ).judgePlan(request);
    expect(await memory.read(off)).toBeUndefined();
  });
});

describe('ModelResolver: the judge of a session learns, unless model calls are recorded', () => {
  it('keeps a plan’s repeats for the session’s judge, and none while recording', async () => {
    const judgePlan = async (record: 'off' | 'record') => {
      const memory = new JudgeNoiseStore(connections[0] as Redis, `jr${randomUUID().slice(0, 8)}`);
      const resolver = new ModelResolver({
        judgeNoise: memory,
        override: judgeScoring([72, 66, 78, 77]),
      });
      const session = makeSession({
        llm: { judgeSamples: { mode: 'adaptive' }, record: { mode: record } },
      });
      const judge = await resolver.forSession(session, 'judge');
      const reply = await judge.judgePlan({ ...request, sessionId: session.id });
      expect(reply.value.samples).toEqual([72, 66, 78, 77]);
      return memory.read(judgeIdentity(session.config.llm));
    };
    expect(await judgePlan('off')).toEqual(spreadOf([72, 66, 78, 77]));
    // A replay must ask for exactly the recorded calls, whatever the cluster learned before.
    expect(await judgePlan('record')).toBeUndefined();
  });
});
