import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/shared/config/load.js';
import {
  keyFiles,
  keyIsSet,
  keyVariables,
  providerKey,
  takeProviderKeys,
} from '../../src/shared/config/provider-keys.js';

const dir = mkdtempSync(join(tmpdir(), 'orq-key-files-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('providerKey', () => {
  it('takes a key out of process.env and still answers it later', () => {
    process.env.ORQ_UNIT_KEY_A = ' sk-a \n';
    expect(providerKey('ORQ_UNIT_KEY_A')).toBe('sk-a');
    expect(process.env.ORQ_UNIT_KEY_A).toBeUndefined();
    expect(providerKey('ORQ_UNIT_KEY_A')).toBe('sk-a');
    const child = spawnSync(
      process.execPath,
      ['-e', 'console.log(process.env.ORQ_UNIT_KEY_A ?? "absent")'],
      {
        encoding: 'utf8',
      },
    );
    expect(child.stdout.trim()).toBe('absent');
  });

  it('takes what a pod names at its start, before anything reads it', () => {
    process.env.ORQ_UNIT_KEY_B = 'sk-b';
    takeProviderKeys(['ORQ_UNIT_KEY_B']);
    expect(process.env.ORQ_UNIT_KEY_B).toBeUndefined();
    expect(providerKey('ORQ_UNIT_KEY_B')).toBe('sk-b');
  });

  it('names the key files a pod is given at its start, read or not, for the sandbox to hide', () => {
    const named = join(dir, 'named-key');
    process.env.ORQ_UNIT_KEY_D_FILE = named;
    try {
      takeProviderKeys(['ORQ_UNIT_KEY_D']);
    } finally {
      delete process.env.ORQ_UNIT_KEY_D_FILE;
    }
    const read = join(dir, 'read-key');
    writeFileSync(read, 'sk-read');
    expect(providerKey('KEY', { KEY_FILE: read })).toBe('sk-read');
    expect(keyFiles()).toEqual(expect.arrayContaining([named, read]));
  });

  it('leaves an environment other than process.env as it is', () => {
    const env = { KEY: 'sk-c' };
    expect(providerKey('KEY', env)).toBe('sk-c');
    expect(env).toEqual({ KEY: 'sk-c' });
  });

  it('reads the file the _FILE variable names', () => {
    const file = join(dir, 'key');
    writeFileSync(file, 'sk-file\n');
    expect(providerKey('KEY', { KEY_FILE: file })).toBe('sk-file');
  });

  it('refuses both the variable and its file, an unreadable file and an empty one', () => {
    const file = join(dir, 'both');
    writeFileSync(file, 'sk-file');
    expect(() => providerKey('KEY', { KEY: 'sk', KEY_FILE: file })).toThrow(
      /Both KEY and KEY_FILE are set/,
    );
    expect(() => providerKey('KEY', { KEY_FILE: join(dir, 'missing') })).toThrow(
      /API key file .*missing \(named by KEY_FILE\) cannot be read: ENOENT/,
    );
    const empty = join(dir, 'empty');
    writeFileSync(empty, '\n');
    expect(() => providerKey('KEY', { KEY_FILE: empty })).toThrow(/is empty/);
  });

  it('is undefined when neither is set', () => {
    expect(providerKey('KEY', {})).toBeUndefined();
  });
});

describe('keyVariables', () => {
  it("names the providers' usual variables and every apiKeyEnv of the config", () => {
    const config = parseConfig({
      llm: { default: { apiKeyEnv: 'MY_KEY' }, judge: { apiKeyEnv: 'JUDGE_KEY' } },
    });
    expect(keyVariables(config).sort()).toEqual(
      ['ANTHROPIC_API_KEY', 'JUDGE_KEY', 'MY_KEY', 'OPENAI_API_KEY'].sort(),
    );
  });
});

describe('keyIsSet', () => {
  it('tells a key in the environment or a file, without taking it', () => {
    expect(keyIsSet('OPENAI_API_KEY', { OPENAI_API_KEY: 'sk-x' })).toBe(true);
    expect(keyIsSet('OPENAI_API_KEY', { OPENAI_API_KEY_FILE: '/run/secrets/k' })).toBe(true);
    expect(keyIsSet('OPENAI_API_KEY', { OPENAI_API_KEY: ' ' })).toBe(false);
    expect(keyIsSet('OPENAI_API_KEY', {})).toBe(false);
  });

  it('still tells a key a pod took out of process.env at its start', () => {
    process.env.ORQ_UNIT_KEY_SET = 'sk-set';
    expect(keyIsSet('ORQ_UNIT_KEY_SET')).toBe(true);
    takeProviderKeys(['ORQ_UNIT_KEY_SET']);
    expect(process.env.ORQ_UNIT_KEY_SET).toBeUndefined();
    expect(keyIsSet('ORQ_UNIT_KEY_SET')).toBe(true);
    expect(keyIsSet('ORQ_UNIT_KEY_NEVER_SET')).toBe(false);
  });
});
