import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, inject, it } from 'vitest';
import { freePort } from '../../src/shared/redis-server.js';
import { cliModules } from '../support/cli.js';

const run = promisify(execFile);

describe('redisAnswers', () => {
  it('says whether a Redis answers, and holds its process no longer than the probe', async () => {
    // A probe that kept the event loop busy after it answered (a refused one did, for 2 s: every
    // `orq` that found its private Redis gone sat it out) would let the unref'd timer print.
    const script = [
      `import { redisAnswers } from '${cliModules()}/shared/redis-server.js';`,
      'const answers = [await redisAnswers(process.argv[1]), await redisAnswers(process.argv[2])];',
      'process.stdout.write(JSON.stringify(answers));',
      "setTimeout(() => process.stdout.write(' and held the process'), 1_500).unref();",
    ].join('\n');
    const down = `redis://127.0.0.1:${await freePort()}`;
    const { stdout } = await run(process.execPath, [
      '--input-type=module',
      '-e',
      script,
      inject('redisUrl'),
      down,
    ]);
    expect(stdout).toBe('[true,false]');
  });
});
