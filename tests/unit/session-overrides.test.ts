import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sessionOverrides, submittedSessionConfig } from '../../src/producers/cli/common.js';
import { loadConfig, parseConfig } from '../../src/shared/config/load.js';
import {
  resolveSessionPaths,
  SESSION_PATH_SETTINGS,
} from '../../src/producers/cli/session-paths.js';
import {
  overridesOutside,
  SAFE_SESSION_OVERRIDES,
} from '../../src/shared/config/override-policy.js';
import { SessionConfig } from '../../src/shared/config/schema.js';
import type { OrqError, ValidationError } from '../../src/shared/errors.js';
import { tempFilesPerFile } from '../support/temp-files.js';

const temp = tempFilesPerFile('orq-session-overrides-');

/** An object with `value` at the dotted `path`. */
function nested(path: readonly string[], value: unknown): Record<string, unknown> {
  return path.reduceRight<unknown>((inner, key) => ({ [key]: inner }), value) as Record<
    string,
    unknown
  >;
}

function at(object: unknown, path: readonly string[]): unknown {
  return path.reduce<unknown>((o, key) => (o as Record<string, unknown>)[key], object);
}

describe('resolveSessionPaths', () => {
  it('knows every session setting the schema marks as a file or directory', () => {
    // The list comes from the schema's marks (pathSettings): losing a mark drops a path here.
    expect(SESSION_PATH_SETTINGS.map((path) => path.join('.')).sort()).toEqual([
      'execution.command.repository',
      'execution.workspaceRoot',
      'llm.record.path',
      'llm.scenario',
      'planning.history.directory',
    ]);
  });

  it('names no setting a remote submit may set by default', () => {
    // A path chosen over HTTP would be read or written on the pods' disks.
    for (const path of SESSION_PATH_SETTINGS) {
      const overrides = nested(path, '/etc/passwd');
      expect(overridesOutside(overrides, SAFE_SESSION_OVERRIDES), path.join('.')).toEqual([
        path.join('.'),
      ]);
    }
  });

  it('makes each relative path setting absolute against the given directory', () => {
    for (const path of SESSION_PATH_SETTINGS) {
      const resolved = resolveSessionPaths(nested(path, 'here/file.yaml'), '/home/me/project');
      expect(at(resolved, path), path.join('.')).toBe('/home/me/project/here/file.yaml');
    }
  });

  it('names only settings the session schema has, each a string', () => {
    // A renamed setting would silently stop being resolved.
    for (const path of SESSION_PATH_SETTINGS) {
      const input = nested(path, '/abs/path');
      // execution.command needs its template to parse.
      if (path[1] === 'command')
        (input.execution as Record<string, unknown>).command = {
          template: ['agent', '{{prompt}}'],
          repository: '/abs/path',
        };
      const parsed = SessionConfig.safeParse(input);
      expect(parsed.success, `${path.join('.')}: ${parsed.error?.message}`).toBe(true);
      expect(at(parsed.data, path)).toBe('/abs/path');
    }
  });

  it('reads a leading ~/ as the home directory (JSON and YAML quote it away from the shell)', () => {
    expect(resolveSessionPaths({ llm: { scenario: '~/s.yaml' } }, '/cwd')).toEqual({
      llm: { scenario: join(homedir(), 's.yaml') },
    });
    expect(resolveSessionPaths({ execution: { workspaceRoot: '~' } }, '/cwd')).toEqual({
      execution: { workspaceRoot: homedir() },
    });
    expect(resolveSessionPaths({ llm: { scenario: '~other/s.yaml' } }, '/cwd')).toEqual({
      llm: { scenario: '/cwd/~other/s.yaml' },
    });
  });

  it('leaves absolute paths, other settings, wrong types and the input itself alone', () => {
    const input = {
      llm: { scenario: '/already/absolute.yaml', record: { mode: 'record' } },
      execution: { workspaceRoot: 42, command: { repository: 'repo', template: ['x'] } },
      budget: { maxTokens: 100 },
    };
    const copy = structuredClone(input);
    const resolved = resolveSessionPaths(input, '/cwd');
    expect(resolved).toEqual({
      llm: { scenario: '/already/absolute.yaml', record: { mode: 'record' } },
      execution: { workspaceRoot: 42, command: { repository: '/cwd/repo', template: ['x'] } },
      budget: { maxTokens: 100 },
    });
    expect(input).toEqual(copy);
    expect(resolveSessionPaths({}, '/cwd')).toEqual({});
    expect(resolveSessionPaths({ llm: 'not an object' }, '/cwd')).toEqual({ llm: 'not an object' });
  });
});

describe('sessionOverrides (--session-config)', () => {
  it('reads inline JSON, resolving its relative paths', () => {
    expect(sessionOverrides('{"llm":{"scenario":"s.yaml"}}', '/work')).toEqual({
      llm: { scenario: '/work/s.yaml' },
    });
    expect(sessionOverrides(undefined)).toBeUndefined();
  });

  it('reads a YAML file and a JSON file', () => {
    const yaml = temp.write(
      'overrides.yaml',
      'budget:\n  maxTokens: 5000\nllm:\n  scenario: a.yaml\n',
    );
    expect(sessionOverrides(yaml, '/work')).toEqual({
      budget: { maxTokens: 5000 },
      llm: { scenario: '/work/a.yaml' },
    });
    const json = temp.write('overrides.json', '{"refinement":{"noiseThreshold":4}}');
    expect(sessionOverrides(json)).toEqual({ refinement: { noiseThreshold: 4 } });
  });

  it('names the line of a YAML syntax error, as a usage error like the others', () => {
    const broken = temp.write('broken.yaml', 'budget:\n  maxTokens: 1\nbudget:\n  maxTokens: 2\n');
    expect(() => sessionOverrides(broken)).toThrow(`--session-config ${broken}: line 3`);
    try {
      sessionOverrides(broken);
    } catch (error) {
      expect((error as OrqError).code).toBe('VALIDATION_FAILED');
      expect((error as OrqError).hint).toContain('YAML or JSON file');
    }
  });

  it('refuses what is not an object of settings, and bad inline JSON, as usage errors', () => {
    const list = temp.write('list.yaml', '- budget\n- llm\n');
    for (const [value, message] of [
      [list, `--session-config ${list} must hold an object of settings`],
      ['{"budget":', '--session-config is not valid JSON'],
      [join(temp.dir, 'missing.yaml'), 'cannot read the file (no such file)'],
    ] as const) {
      expect(() => sessionOverrides(value), value).toThrow(message);
      try {
        sessionOverrides(value);
      } catch (error) {
        expect((error as OrqError).code).toBe('VALIDATION_FAILED');
        expect((error as OrqError).hint).toContain('YAML or JSON file');
      }
    }
  });
});

describe('submittedSessionConfig', () => {
  const openai = { llm: { default: { provider: 'openai', model: 'gpt-4o-mini' } } };
  const unexpected = () => {
    throw new Error('the configuration alone was not to be checked');
  };
  const errorOf = (run: () => unknown) => {
    try {
      run();
    } catch (error) {
      return error as ValidationError;
    }
    throw new Error('expected an error');
  };

  it('merges the overrides over the configuration', () => {
    const config = submittedSessionConfig(
      parseConfig({}),
      { budget: { maxTokens: 50_000 } },
      { sessionConfig: '{}' },
      unexpected,
    );
    expect(config.budget.maxTokens).toBe(50_000);
  });

  it("blames a problem only the overrides bring on --session-config, with the overrides' paths", () => {
    const error = errorOf(() =>
      submittedSessionConfig(
        parseConfig(openai),
        { budget: { maxUsd: 1 } },
        { sessionConfig: 'session.yaml' },
        unexpected,
      ),
    );
    expect(error.message).toMatch(/^Invalid --session-config session\.yaml: budget\.prices: /);
    expect(error.issues).toEqual([
      expect.objectContaining({ path: 'budget.prices', settings: ['budget.maxUsd'] }),
    ]);
    const inline = errorOf(() =>
      submittedSessionConfig(
        parseConfig({}),
        { budget: { maxTokens: -1 } },
        { sessionConfig: '{"budget":{}}' },
        unexpected,
      ),
    );
    expect(inline.message).toMatch(/^Invalid --session-config: budget\.maxTokens: /);
  });

  it('names an unknown key as written in the overrides, as `orq config check` names one in a file', () => {
    const top = errorOf(() =>
      submittedSessionConfig(
        parseConfig({}),
        { foo: 1, bar: 2 },
        { sessionConfig: '{"foo":1}' },
        unexpected,
      ),
    );
    expect(top.message).toContain(
      'Invalid --session-config: unknown key "foo" at the top level; unknown key "bar" at the top level. ',
    );
    const nestedKey = errorOf(() =>
      submittedSessionConfig(
        parseConfig({}),
        { refinement: { fooBar: 1 } },
        { sessionConfig: 'session.yaml' },
        unexpected,
      ),
    );
    expect(nestedKey.message).toContain(
      'Invalid --session-config session.yaml: unknown key "refinement.fooBar". ',
    );
    expect(nestedKey.issues).toEqual([
      { path: 'refinement.fooBar', message: 'unknown key "refinement.fooBar"' },
    ]);
  });

  it('blames a problem the configuration has on its own on the configuration, naming its file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'orq-overrides-'));
    const file = join(dir, 'orq.yaml');
    writeFileSync(file, JSON.stringify({ ...openai, budget: { maxUsd: 1 } }));
    try {
      const base = loadConfig({ file, env: {} });
      const error = errorOf(() =>
        submittedSessionConfig(
          base,
          { budget: { maxTokens: 50_000 } },
          { sessionConfig: 'session.yaml' },
          () => loadConfig({ file, env: {}, submitChecks: true }),
        ),
      );
      expect(error.message).toMatch(
        `Invalid configuration in ${file}: budget.prices: maxUsd needs a price for every model the roles use; none for gpt-4o-mini`,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
