import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  applyEnvOverrides,
  configWarnings,
  findConfigFile,
  loadConfig,
  mergeConfig,
  parseConfig,
  readConfigFile,
} from '../../src/shared/config/load.js';
import { ConfigError, OrqError } from '../../src/shared/errors.js';
import { tempFilesPerFile } from '../support/temp-files.js';

/** The ConfigError a call throws, so its issues can be inspected. */
function configErrorOf(run: () => unknown): ConfigError {
  try {
    run();
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('expected a ConfigError');
}

function orqErrorOf(run: () => unknown): OrqError {
  try {
    run();
  } catch (error) {
    if (error instanceof OrqError) return error;
    throw error;
  }
  throw new Error('expected an OrqError');
}

const temp = tempFilesPerFile('orq-config-test-');
const writeTemp = (name: string, text: string) => temp.write(name, text);

describe('parseConfig fills the defaults of every seed', () => {
  const config = parseConfig({});

  it('seed 000: the refinement loop table', () => {
    expect(config.refinement).toMatchObject({
      maxRefinementAttempts: 2,
      refineSuggestionsOnSuccess: false,
      maxSuggestionReplans: 1,
      enableIndividualFallback: true,
      deltaThreshold: 5,
      deltaThresholdPercent: 5,
      taskCountChangeThreshold: 0.3,
      taskCountChangeMinAbsolute: 2,
    });
    expect(config.refinement.maxQualityRetries).toBeUndefined();
  });

  it('seed 001: replanning is enabled with 3 iterations and a 300 s timeout', () => {
    expect(config.replanning).toEqual({ enabled: true, maxIterations: 3, timeoutSeconds: 300 });
  });

  it('seed 002: term preservation is on, rate 0.8, no custom terms, loss only warns', () => {
    expect(config.refinement).toMatchObject({
      enableTermPreservationCheck: true,
      treatTermLossAsStructureBreak: false,
      minPreservationRate: 0.8,
      customRequiredTerms: [],
    });
  });

  it('seed 003: noiseThreshold is 3 and stagnation with an unacceptable plan rejects', () => {
    expect(config.refinement.noiseThreshold).toBe(3);
    expect(config.refinement.stagnationPolicy).toBe('reject');
  });

  it("seed 004: the planning section with the seed's snake_case keys", () => {
    expect(config.planning).toEqual({
      enabled: true,
      strategy: 'chain_of_thought',
      max_subtasks: 100,
      decomposition_level: 'moderate',
      reflection: { enabled: true, trigger_on_error: true, trigger_interval: 3 },
      revision: { max_revisions: 3 },
      // DESIGN.md: the history lives in Redis by default; JSONL files are opt-in.
      history: { storage_type: 'redis', directory: 'planning_history' },
    });
  });

  it('orq itself: redis prefix, queues, concurrency, llm and log level', () => {
    expect(config.redis).toEqual({ prefix: 'orq', cluster: false });
    expect(config.queues.attempts).toBe(3);
    expect(config.queues.lockDurationMs).toBe(30_000);
    expect(config.concurrency).toEqual({
      planner: 2,
      judge: 4,
      worker: 4,
      replanner: 2,
      coordinator: 8,
    });
    expect(config.execution).toEqual({
      maxContinuations: 3,
      defaultExecutor: 'llm',
      taskExecutors: [],
      maxAgentActions: 30,
      askHuman: true,
      workspaceRoot: '.orq/workspaces',
      toolTimeoutSeconds: 60,
      toolMaxOutputBytes: 65_536,
      toolSandbox: 'auto',
      mcpServers: [],
    });
    expect(config.llm.default.provider).toBe('builtin');
    expect(config.llm.maxRepairAttempts).toBe(1);
    expect(config.logLevel).toBe('info');
  });

  it('a partly written section keeps the defaults of the keys it leaves out', () => {
    const partial = parseConfig({ planning: { reflection: { trigger_interval: 5 } } });
    expect(partial.planning.reflection).toEqual({
      enabled: true,
      trigger_on_error: true,
      trigger_interval: 5,
    });
    expect(partial.planning.max_subtasks).toBe(100);
  });
});

describe('parseConfig rejects what is not a valid configuration', () => {
  it('a typo in a key is an error that names the key by its full path', () => {
    const error = configErrorOf(() => parseConfig({ refinement: { noiseTreshold: 2 } }));
    expect(error.issues).toContainEqual({
      path: 'refinement.noiseTreshold',
      message: expect.stringContaining('unknown key "refinement.noiseTreshold"'),
    });
    // The message names the key once, not as `refinement.noiseTreshold: unknown key "…"`.
    expect(error.message).toContain(
      'Invalid configuration: unknown key "refinement.noiseTreshold" (did you mean',
    );
  });

  it('a typo suggests the key that was probably meant', () => {
    const error = configErrorOf(() => parseConfig({ refinement: { noiseTreshold: 2 } }));
    expect(error.message).toContain('did you mean "refinement.noiseThreshold"?');
  });

  it('a typo in a nested section is named with its whole path', () => {
    const error = configErrorOf(() =>
      parseConfig({ planning: { reflection: { trigger_intervall: 2 } } }),
    );
    expect(error.issues.map((i) => i.path)).toEqual(['planning.reflection.trigger_intervall']);
  });

  it('an unknown top-level section is named', () => {
    const error = configErrorOf(() => parseConfig({ refinment: {} }));
    expect(error.issues.map((i) => i.path)).toEqual(['refinment']);
    expect(error.message).toContain(
      'unknown key "refinment" at the top level (did you mean "refinement"?)',
    );
  });

  it('every bad key is reported, not only the first', () => {
    const error = configErrorOf(() => parseConfig({ refinement: { a: 1, b: 2 }, c: 3 }));
    expect(error.issues.map((i) => i.path).sort()).toEqual(['c', 'refinement.a', 'refinement.b']);
  });

  it('an out-of-range value names the key and its limit', () => {
    const error = configErrorOf(() => parseConfig({ refinement: { noiseThreshold: 11 } }));
    expect(error.message).toContain('refinement.noiseThreshold: at most 10, got 11');
  });

  it('a value of the wrong type names the key and the expected type', () => {
    const error = configErrorOf(() => parseConfig({ replanning: { maxIterations: 'three' } }));
    expect(error.issues).toEqual([
      { path: 'replanning.maxIterations', message: 'expected a number, got "three"' },
    ]);
  });

  it('a value outside an enum is rejected', () => {
    const error = configErrorOf(() => parseConfig({ planning: { decomposition_level: 'huge' } }));
    expect(error.issues[0]?.path).toBe('planning.decomposition_level');
  });

  it('a non-integer where an integer is required is rejected', () => {
    const error = configErrorOf(() => parseConfig({ planning: { max_subtasks: 1.5 } }));
    expect(error.issues[0]?.path).toBe('planning.max_subtasks');
  });

  it('the error names its source', () => {
    const error = configErrorOf(() => parseConfig({ x: 1 }, 'orq.config.yaml'));
    expect(error.message).toContain('Invalid configuration in orq.config.yaml');
    expect(error.code).toBe('CONFIG_INVALID');
    // Without a source, no made-up one ("in configuration").
    expect(configErrorOf(() => parseConfig({ x: 1 })).message).toMatch(
      /^Invalid configuration: unknown key "x" at the top level\./,
    );
  });
});

describe('the legacy maxQualityRetries (seed 000)', () => {
  it('stands in for maxRefinementAttempts when that is not set', () => {
    const config = parseConfig({ refinement: { maxQualityRetries: 4 } });
    expect(config.refinement.maxRefinementAttempts).toBe(4);
  });

  it('loses to maxRefinementAttempts when both are set', () => {
    const config = parseConfig({ refinement: { maxQualityRetries: 4, maxRefinementAttempts: 1 } });
    expect(config.refinement.maxRefinementAttempts).toBe(1);
  });

  it('is validated like maxRefinementAttempts', () => {
    const error = configErrorOf(() => parseConfig({ refinement: { maxQualityRetries: 11 } }));
    expect(error.issues.map((i) => i.path)).toContain('refinement.maxQualityRetries');
  });

  it('does not change the input object', () => {
    const input = { refinement: { maxQualityRetries: 4 } };
    parseConfig(input);
    expect(input).toEqual({ refinement: { maxQualityRetries: 4 } });
  });
});

describe('readConfigFile', () => {
  it('reads YAML by its .yaml extension', () => {
    const path = writeTemp('a.yaml', 'refinement:\n  noiseThreshold: 2\n');
    expect(readConfigFile(path)).toEqual({ refinement: { noiseThreshold: 2 } });
  });

  it('reads YAML by its .yml extension, with comments and seed 004 keys', () => {
    const path = writeTemp(
      'a.yml',
      'planning:\n  enabled: true  # default\n  reflection:\n    trigger_interval: 4\n',
    );
    expect(parseConfig(readConfigFile(path)).planning.reflection.trigger_interval).toBe(4);
  });

  it('reads JSON by its .json extension', () => {
    const path = writeTemp('a.json', '{ "replanning": { "maxIterations": 5 } }');
    expect(readConfigFile(path)).toEqual({ replanning: { maxIterations: 5 } });
  });

  it('tries JSON, then YAML, for another extension', () => {
    expect(readConfigFile(writeTemp('a.conf', '{"logLevel":"warn"}'))).toEqual({
      logLevel: 'warn',
    });
    expect(readConfigFile(writeTemp('b.conf', 'logLevel: debug\n'))).toEqual({
      logLevel: 'debug',
    });
  });

  it('an empty YAML file is a configuration of defaults', () => {
    expect(readConfigFile(writeTemp('empty.yaml', '# nothing set\n'))).toEqual({});
  });

  it('a missing file is CONFIG_NOT_FOUND with its path', () => {
    const path = join(temp.dir, 'missing.yaml');
    const error = orqErrorOf(() => readConfigFile(path));
    expect(error.code).toBe('CONFIG_NOT_FOUND');
    expect(error.message).toContain(path);
  });

  it('a YAML syntax error names the file and the line', () => {
    const path = writeTemp('broken.yaml', 'refinement:\n  noiseThreshold: 2\n a: [1,\n');
    const error = configErrorOf(() => readConfigFile(path));
    expect(error.message).toContain(path);
    expect(error.issues[0]?.path).toMatch(/^line 3, column \d+$/);
  });

  it('a JSON syntax error names the file and the line', () => {
    const path = writeTemp('broken.json', '{\n  "logLevel": "info",\n}\n');
    const error = configErrorOf(() => readConfigFile(path));
    expect(error.message).toContain(path);
    expect(error.issues[0]?.path).toBe('line 3, column 1');
  });

  it('a path that is a directory cannot be read, and says so', () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-config-dir-'));
    expect(configErrorOf(() => readConfigFile(dir)).issues).toEqual([
      { path: '(file)', message: 'cannot be read: it is a directory' },
    ]);
  });

  it('a duplicate YAML key is a syntax error on its line', () => {
    const path = writeTemp('dup.yaml', 'logLevel: info\nlogLevel: warn\n');
    expect(configErrorOf(() => readConfigFile(path)).issues[0]?.path).toMatch(/^line 2,/);
  });
});

describe('applyEnvOverrides', () => {
  it('REDIS_URL, ORQ_PREFIX and ORQ_LOG_LEVEL set their keys', () => {
    const raw = applyEnvOverrides(
      {},
      { REDIS_URL: 'redis://h:6379', ORQ_PREFIX: 'team-a', ORQ_LOG_LEVEL: 'debug' },
    );
    expect(raw).toEqual({ redis: { url: 'redis://h:6379', prefix: 'team-a' }, logLevel: 'debug' });
  });

  it.each([
    'redis://127.0.0.1:99999',
    'redis://127.0.0.1:0',
    'redis://[bad',
    'redis://localhost:6379x',
    'http://127.0.0.1:6379',
    'redis://',
    'redis://127.0.0.1:6379/abc',
    'redis://127.0.0.1:6379/1/2',
    // Bare addresses ioredis cannot parse either: they threw `Invalid URL` from inside it.
    'not a url',
    'a b:6379',
  ])('refuses REDIS_URL=%s, naming the variable and the form it takes', (url) => {
    const error = configErrorOf(() => loadConfig({ env: { REDIS_URL: url }, cwd: '/' }));
    expect(error.issues).toEqual([
      {
        path: 'redis.url',
        message: expect.stringContaining('expected a redis:// or rediss:// URL'),
      },
    ]);
    expect(error.message).toContain('REDIS_URL');
  });

  it.each([
    'redis://h:6379',
    'rediss://user:pw@h:6380/2',
    'redis://h',
    'redis://h:6379/',
    'localhost:6379',
    '127.0.0.1:6379/2',
    '6379',
    '/var/run/redis.sock',
  ])('accepts REDIS_URL=%s', (url) => {
    expect(loadConfig({ env: { REDIS_URL: url }, cwd: '/' }).redis.url).toBe(url);
  });

  it('ORQ__section__key sets a nested key, JSON values parsed', () => {
    const raw = applyEnvOverrides(
      { refinement: { deltaThreshold: 6 } },
      {
        ORQ__refinement__noiseThreshold: '4',
        ORQ__refinement__refineSuggestionsOnSuccess: 'true',
        ORQ__refinement__customRequiredTerms: '["認証","API"]',
        ORQ__planning__reflection__trigger_interval: '5',
      },
    );
    expect(raw).toEqual({
      refinement: {
        deltaThreshold: 6,
        noiseThreshold: 4,
        refineSuggestionsOnSuccess: true,
        customRequiredTerms: ['認証', 'API'],
      },
      planning: { reflection: { trigger_interval: 5 } },
    });
  });

  it('a value that is not JSON is used as a string', () => {
    expect(applyEnvOverrides({}, { ORQ__llm__default__model: 'gpt-4o-mini' })).toEqual({
      llm: { default: { model: 'gpt-4o-mini' } },
    });
  });

  it('a string key keeps a value that would parse as a number', () => {
    expect(applyEnvOverrides({}, { ORQ__redis__prefix: '123' })).toEqual({
      redis: { prefix: '123' },
    });
  });

  it('a whole section can be given as a JSON object', () => {
    const config = parseConfig(
      applyEnvOverrides({}, { ORQ__replanning: '{"enabled":false,"maxIterations":1}' }),
    );
    expect(config.replanning).toEqual({ enabled: false, maxIterations: 1, timeoutSeconds: 300 });
  });

  it('an unknown key is a ConfigError naming the variable', () => {
    const error = configErrorOf(() =>
      applyEnvOverrides({}, { ORQ__refinement__noiseTreshold: '4' }),
    );
    expect(error.issues).toHaveLength(1);
    expect(error.issues[0]?.path).toBe('ORQ__refinement__noiseTreshold');
    expect(error.issues[0]?.message).toContain('unknown key "refinement.noiseTreshold"');
    expect(error.issues[0]?.message).toContain('did you mean "refinement.noiseThreshold"?');
  });

  it('an unknown section is a ConfigError naming the variable', () => {
    const error = configErrorOf(() => applyEnvOverrides({}, { ORQ__refinment__x: '1' }));
    expect(error.message).toContain('ORQ__refinment__x');
  });

  it('a path below a plain value is a ConfigError naming the variable', () => {
    const error = configErrorOf(() => applyEnvOverrides({}, { ORQ__logLevel__x: '1' }));
    expect(error.issues[0]?.path).toBe('ORQ__logLevel__x');
  });

  it('variables that are not orq configuration are ignored', () => {
    expect(
      applyEnvOverrides({ logLevel: 'warn' }, { PATH: '/bin', ORQ_TEST_REDIS_URL: 'x' }),
    ).toEqual({ logLevel: 'warn' });
  });
});

describe('loadConfig', () => {
  it('reads the named file, then the environment, then the overrides', () => {
    const file = writeTemp(
      'layers.yaml',
      'refinement:\n  noiseThreshold: 2\n  deltaThreshold: 8\nlogLevel: warn\n',
    );
    const config = loadConfig({
      file,
      env: { ORQ__refinement__noiseThreshold: '4', ORQ_LOG_LEVEL: 'debug' },
      overrides: { logLevel: 'error' },
    });
    expect(config.refinement.noiseThreshold).toBe(4);
    expect(config.refinement.deltaThreshold).toBe(8);
    expect(config.logLevel).toBe('error');
    expect(config.replanning.maxIterations).toBe(3);
  });

  it('reads the file named by ORQ_CONFIG', () => {
    const file = writeTemp('from-env.json', '{"replanning":{"maxIterations":7}}');
    expect(loadConfig({ env: { ORQ_CONFIG: file } }).replanning.maxIterations).toBe(7);
  });

  it('finds ./orq.config.yaml in the working directory', () => {
    const cwd = mkdtempSync(join(temp.dir, 'cwd-'));
    writeFileSync(join(cwd, 'orq.config.yaml'), 'concurrency:\n  worker: 16\n');
    expect(findConfigFile({ cwd, env: {} })).toBe(join(cwd, 'orq.config.yaml'));
    expect(loadConfig({ cwd, env: {} }).concurrency.worker).toBe(16);
  });

  it('without any file it is the defaults', () => {
    const cwd = mkdtempSync(join(temp.dir, 'empty-'));
    expect(loadConfig({ cwd, env: {} })).toEqual(parseConfig({}));
  });

  it('a missing ORQ_CONFIG file says that ORQ_CONFIG names it', () => {
    const error = orqErrorOf(() =>
      loadConfig({ env: { ORQ_CONFIG: join(temp.dir, 'nope.yaml') } }),
    );
    expect(error.code).toBe('CONFIG_NOT_FOUND');
    expect(error.message).toContain('ORQ_CONFIG');
  });

  it('a bad value from the environment names the variable that set it', () => {
    const error = configErrorOf(() =>
      loadConfig({ cwd: temp.dir, env: { ORQ__refinement__noiseThreshold: '20' } }),
    );
    expect(error.issues[0]?.path).toBe('refinement.noiseThreshold');
    expect(error.issues[0]?.message).toContain('ORQ__refinement__noiseThreshold');
  });

  it('a bad value from the environment is said to be in the environment, not the file', () => {
    const noFile = configErrorOf(() =>
      loadConfig({ cwd: temp.dir, env: { ORQ_LOG_LEVEL: 'loud' } }),
    );
    expect(noFile.message).toMatch(/^Invalid configuration in the environment: logLevel: /);
    expect(noFile.message).toContain('(set by ORQ_LOG_LEVEL)');
    expect(noFile.details).toEqual({ source: 'the environment' });
    const file = writeTemp('fine.yaml', 'logLevel: warn\n');
    const withFile = configErrorOf(() =>
      loadConfig({ file, env: { ORQ__refinement__noiseThreshold: 'abc' } }),
    );
    expect(withFile.message).toMatch(/^Invalid configuration in the environment: /);
    // A bad value in the file too: the file is named, the variable still on its issue.
    const bad = writeTemp('bad.yaml', 'logLevel: loud\n');
    const both = configErrorOf(() =>
      loadConfig({ file: bad, env: { ORQ__refinement__noiseThreshold: 'abc' } }),
    );
    expect(both.message).toMatch(new RegExp(`^Invalid configuration in ${bad}: `));
    expect(both.message).toContain('(set by ORQ__refinement__noiseThreshold)');
  });

  it('without a file, an error not from the environment names no made-up source', () => {
    const error = configErrorOf(() =>
      loadConfig({ cwd: temp.dir, env: {}, overrides: { logLevel: 'loud' } }),
    );
    expect(error.message).toMatch(/^Invalid configuration: logLevel: /);
  });

  it('with submitChecks, refuses what a submit would, as an error of the file', () => {
    const file = writeTemp(
      'usd.yaml',
      'llm:\n  default:\n    provider: openai\n    model: gpt-4o-mini\nbudget:\n  maxUsd: 1\n',
    );
    // Valid as a configuration: the pods' defaults, which a submit may still price.
    expect(loadConfig({ file, env: {} }).budget.maxUsd).toBe(1);
    const error = configErrorOf(() => loadConfig({ file, env: {}, submitChecks: true }));
    expect(error.message).toMatch(
      new RegExp(`^Invalid configuration in ${file}: budget\\.prices: `),
    );
    expect(error.issues).toEqual([
      {
        path: 'budget.prices',
        message: 'maxUsd needs a price for every model the roles use; none for gpt-4o-mini',
        settings: ['budget.maxUsd'],
      },
    ]);
  });

  it('with submitChecks, names the variable that set the maxUsd a missing price is needed for', () => {
    const file = writeTemp(
      'unpriced.yaml',
      'llm:\n  default:\n    provider: openai\n    model: gpt-4o-mini\n',
    );
    const error = configErrorOf(() =>
      loadConfig({ file, env: { ORQ__budget__maxUsd: '1' }, submitChecks: true }),
    );
    expect(error.issues[0]?.path).toBe('budget.prices');
    expect(error.issues[0]?.message).toContain('(budget.maxUsd set by ORQ__budget__maxUsd)');
    // The file named the unpriced model, so it is still the file's error.
    expect(error.message).toMatch(new RegExp(`^Invalid configuration in ${file}: `));
  });

  it('a file whose top level is not a mapping is rejected', () => {
    const file = writeTemp('list.yaml', '- a\n- b\n');
    const error = configErrorOf(() => loadConfig({ file, env: { ORQ_LOG_LEVEL: 'warn' } }));
    expect(error.issues[0]?.path).toBe('(root)');
  });

  it('applies the legacy maxQualityRetries from a file', () => {
    const file = writeTemp('legacy.yaml', 'refinement:\n  maxQualityRetries: 5\n');
    expect(loadConfig({ file, env: {} }).refinement.maxRefinementAttempts).toBe(5);
  });
});

describe('mergeConfig', () => {
  it('merges objects key by key, replaces arrays, and skips undefined', () => {
    expect(
      mergeConfig(
        { a: { b: 1, c: [1, 2] }, d: 1 },
        { a: { c: [3] }, d: undefined },
        { a: { e: 2 } },
      ),
    ).toEqual({ a: { b: 1, c: [3], e: 2 }, d: 1 });
  });
});

describe('configWarnings', () => {
  it('the defaults give no advice', () => {
    expect(configWarnings(parseConfig({}))).toEqual([]);
  });

  it('noiseThreshold >= deltaThreshold is advised against (seed 003)', () => {
    const warnings = configWarnings(
      parseConfig({ refinement: { noiseThreshold: 5, deltaThreshold: 5 } }),
    );
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('noiseThreshold < deltaThreshold');
  });

  it('the legacy key is advised to be renamed, or said to be ignored', () => {
    expect(configWarnings(parseConfig({ refinement: { maxQualityRetries: 3 } }))[0]).toContain(
      'legacy name',
    );
    expect(
      configWarnings(
        parseConfig({ refinement: { maxQualityRetries: 3, maxRefinementAttempts: 1 } }),
      )[0],
    ).toContain('is ignored');
  });

  it('treatTermLossAsStructureBreak without the preservation check has no effect', () => {
    const warnings = configWarnings(
      parseConfig({
        refinement: { treatTermLossAsStructureBreak: true, enableTermPreservationCheck: false },
      }),
    );
    expect(warnings[0]).toContain('has no effect');
  });

  it('a real provider with the builtin model is not a warning but an error (unworkable.ts)', () => {
    const error = configErrorOf(() => parseConfig({ llm: { judge: { provider: 'openai' } } }));
    expect(error.issues).toEqual([
      {
        path: 'llm.judge.model',
        message: expect.stringContaining('provider openai needs a model'),
      },
    ]);
  });
});
