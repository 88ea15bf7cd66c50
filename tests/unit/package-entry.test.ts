import { describe, expect, it } from 'vitest';
import * as orq from '../../src/index.js';

describe('the package entry', () => {
  it.each([
    'makeRefinementDecision',
    'decideBrokenReplan',
    'isStagnated',
    'isScoreChangeSignificant',
    'determineScoreDirection',
    'validateStructure',
    'extractRequiredTerms',
    'validateTermPreservation',
    'decideTaskOutcome',
    'replaceTaskWithSubtasks',
    'deriveSessionResult',
    'parseConfig',
    'createClient',
    'startRoles',
    'startTracing',
    'stopTracing',
    'createHttpServer',
    'startHttpServer',
  ])('exports %s as a function', (name) => {
    expect(typeof (orq as Record<string, unknown>)[name]).toBe('function');
  });

  it('exports the zod schemas that define every payload', () => {
    for (const name of [
      'Task',
      'Session',
      'PlanBreakdown',
      'QualityJudgement',
      'TaskJudgement',
      'HistoryEntry',
      'OrqConfig',
      'SubmitRequest',
      'ResumeRequest',
      // What prune, list and history take: OrqClient's signatures name them.
      'PruneRequest',
      'ListRequest',
      'HistoryRequest',
      // What client.result gives and takes.
      'SessionResult',
      'ResultRequest',
    ]) {
      expect(typeof (orq as Record<string, { safeParse?: unknown }>)[name]?.safeParse, name).toBe(
        'function',
      );
    }
  });

  it('parseConfig fills every default of the seeds', () => {
    const config = orq.parseConfig({});
    expect(config.refinement).toMatchObject({
      maxRefinementAttempts: 2,
      noiseThreshold: 3,
      deltaThreshold: 5,
    });
    expect(config.replanning).toEqual({ enabled: true, maxIterations: 3, timeoutSeconds: 300 });
  });
});
