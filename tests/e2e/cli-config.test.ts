import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { once } from 'node:events';
import { orq as runOrq, spawnOrq } from '../support/cli.js';
import { tempFilesPerFile } from '../support/temp-files.js';

/** `orq ARGS` as a process, with only the given orq variables in its environment. */
const orq = (args: string[], env: Record<string, string> = {}) => runOrq(args, { env });

const temp = tempFilesPerFile('orq-cli-config-');
const writeTemp = (name: string, text: string) => temp.write(name, text);

/** Valid on its own, but a maxUsd budget cannot count calls to a model it has no price for. */
const USD_NO_PRICE =
  'llm:\n  default:\n    provider: openai\n    model: gpt-4o-mini\nbudget:\n  maxUsd: 1\n';

describe('orq config check', () => {
  it('accepts a valid file with exit code 0', async () => {
    const file = writeTemp(
      'good.yaml',
      'refinement:\n  noiseThreshold: 2\nplanning:\n  reflection:\n    trigger_interval: 4\n',
    );
    const result = await orq(['config', 'check', file]);
    expect(result.stderr).toBe('');
    expect(result.stdout).toBe(`${file}: OK\n`);
    expect(result.code).toBe(0);
  });

  it('rejects a typo with exit code 2 and names the key', async () => {
    const file = writeTemp('typo.yaml', 'refinement:\n  noiseTreshold: 2\n');
    const result = await orq(['config', 'check', file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('refinement.noiseTreshold');
    expect(result.stderr).toContain('did you mean "refinement.noiseThreshold"?');
    expect(result.stdout).not.toContain('OK');
  });

  it('prints one line per error', async () => {
    const file = writeTemp('two.json', '{"refinement":{"noiseThreshold":11},"foo":1}');
    const result = await orq(['config', 'check', file]);
    expect(result.code).toBe(2);
    const lines = result.stderr.trim().split('\n');
    expect(lines).toContainEqual(`${file}: refinement.noiseThreshold: at most 10, got 11`);
    expect(lines).toContainEqual(`${file}: unknown key "foo" at the top level`);
  });

  it("words a bad value as what the key expects and what it got, not zod's", async () => {
    const file = writeTemp('nan.yaml', 'prefx: x\nconcurrency:\n  worker: .nan\n');
    const result = await orq(['config', 'check', file]);
    expect(result.code).toBe(2);
    const lines = result.stderr.trim().split('\n');
    expect(lines).toContainEqual(`${file}: unknown key "prefx" at the top level`);
    expect(lines).toContainEqual(`${file}: concurrency.worker: expected a number, got NaN`);
    expect(result.stderr).not.toMatch(/\(root\)|received|Invalid input/);
    // A command that loads it says the same in its one line.
    const run = await orq(['status', '--config', file]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain(
      `orq: Invalid configuration in ${file}: concurrency.worker: expected a number, got NaN; unknown key "prefx" at the top level.`,
    );
  });

  it('names the option a bad value was given to, and what it takes', async () => {
    for (const [args, line] of [
      [
        ['status', '--limit', 'abc'],
        'orq: --limit: expected a whole number from 1 to 500, got "abc"',
      ],
      [
        ['start', '--latency', 'abc'],
        'orq: --latency: expected a whole number from 0 to 600,000, got "abc"',
      ],
    ] as const) {
      const result = await orq([...args]);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toBe(`${line}\n`);
    }
  });

  it('prints advice as warnings and still exits 0, or 1 with --strict', async () => {
    const file = writeTemp('noisy.yaml', 'refinement:\n  noiseThreshold: 6\n');
    const lenient = await orq(['config', 'check', file]);
    expect(lenient.code).toBe(0);
    expect(lenient.stdout).toContain(`${file}: OK`);
    expect(lenient.stdout).toContain('warning: refinement.noiseThreshold (6) >=');
    const strict = await orq(['config', 'check', '--strict', file]);
    expect(strict.code).toBe(1);
    // A failed check does not say OK.
    expect(strict.stdout).toBe('');
    expect(strict.stderr).toContain('warning: refinement.noiseThreshold (6) >=');
    expect(strict.stderr).toContain('1 warning(s) fail the check under --strict');
  });

  it('checks the environment overrides too, naming the variable', async () => {
    const file = writeTemp('env.yaml', '{}\n');
    const result = await orq(['config', 'check', file], { ORQ__replanning__maxIteration: '2' });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('ORQ__replanning__maxIteration');
    expect((await orq(['config', 'check', '--no-env', file])).code).toBe(0);
  });

  it('refuses what a submit of the file would, with the same message and exit code 2', async () => {
    const file = writeTemp('usdnoprice.yaml', USD_NO_PRICE);
    const result = await orq(['config', 'check', file]);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain(
      `${file}: budget.prices: maxUsd needs a price for every model the roles use; none for gpt-4o-mini\n`,
    );
    expect(result.stderr).toContain(`${file}: 1 error(s)`);
    // Priced, the same budget is fine.
    const priced = writeTemp(
      'usdprice.yaml',
      `${readFileSync(file, 'utf8')}  prices:\n    gpt-4o-mini: { inputPerMTok: 0.15, outputPerMTok: 0.6 }\n`,
    );
    expect(await orq(['config', 'check', priced])).toMatchObject({
      code: 0,
      stdout: `${priced}: OK\n`,
    });
  });

  it('reports a syntax error with its line, exit code 2', async () => {
    const file = writeTemp('broken.yaml', 'logLevel: info\nlogLevel: warn\n');
    const result = await orq(['config', 'check', file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`${file}: line 2`);
  });

  it('reports a missing file with exit code 2', async () => {
    const result = await orq(['config', 'check', join(temp.dir, 'missing.yaml')]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('missing.yaml not found');
  });
});

describe('a configuration a submit would refuse', () => {
  // A Redis that does not answer: the refusal must come before the command gets that far.
  const noRedis = { REDIS_URL: 'redis://127.0.0.1:1' };

  it.each(['run', 'submit'])(
    'is the configuration file when orq %s --config FILE',
    async (command) => {
      const file = writeTemp(`${command}-usdnoprice.yaml`, USD_NO_PRICE);
      const result = await orq([command, 'Write it', '--config', file], noRedis);
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toContain(
        `orq: Invalid configuration in ${file}: budget.prices: maxUsd needs a price for every model the roles use; none for gpt-4o-mini`,
      );
    },
  );
});

describe('orq config schema', () => {
  it('prints the JSON Schema', async () => {
    const result = await orq(['config', 'schema']);
    expect(result.code).toBe(0);
    const schema = JSON.parse(result.stdout) as Record<string, unknown>;
    expect(schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
    expect(schema).toHaveProperty('properties.refinement.properties.noiseThreshold.default', 3);
  });

  it('writes it to a file with --out', async () => {
    const out = join(temp.dir, 'out', 'orq.schema.json');
    const result = await orq(['config', 'schema', '--out', out]);
    expect(result.code).toBe(0);
    expect(JSON.parse(readFileSync(out, 'utf8'))).toHaveProperty('$id', 'urn:orq:config');
  });
});

describe('orq config show', () => {
  it('prints the effective configuration with defaults and overrides, password hidden', async () => {
    const file = writeTemp('show.yaml', 'replanning:\n  maxIterations: 5\n');
    const result = await orq(['config', 'show', file, '--json'], {
      REDIS_URL: 'redis://user:secret@localhost:6379',
    });
    expect(result.code).toBe(0);
    const shown = JSON.parse(result.stdout) as {
      replanning: { maxIterations: number; timeoutSeconds: number };
      redis: { url: string };
    };
    expect(shown.replanning).toMatchObject({ maxIterations: 5, timeoutSeconds: 300 });
    expect(shown.redis.url).toBe('redis://user:***@localhost:6379');
  });

  it('says a bad value from the environment is there, naming the variable', async () => {
    const cwd = temp.dir;
    for (const [variable, value] of [
      ['ORQ__refinement__noiseThreshold', 'abc'],
      ['ORQ_LOG_LEVEL', 'loud'],
    ] as const) {
      const result = await runOrq(['config', 'show'], { env: { [variable]: value }, cwd });
      expect(result.code).toBe(2);
      expect(result.stderr).toMatch(/^orq: Invalid configuration in the environment: /);
      expect(result.stderr).toContain(`(set by ${variable})`);
    }
  });

  it('prints YAML by default', async () => {
    const file = writeTemp('show2.yaml', '{}\n');
    const result = await orq(['config', 'show', file]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('  noiseThreshold: 3\n');
  });
});

describe('output to a reader that went away', () => {
  it('ends quietly with exit code 0, as `orq config schema | head -1` expects', async () => {
    const child = spawnOrq(['config', 'schema']);
    // The reader closes before the first write: every write then fails with EPIPE.
    child.stdout?.destroy();
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const [code] = (await once(child, 'exit')) as [number | null];
    expect(stderr).toBe('');
    expect(code).toBe(0);
  });
});
