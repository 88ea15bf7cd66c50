import { describe, expect, it } from 'vitest';
import {
  fallbackGlobalConfig,
  fallbackIdentityEnv,
  gitSubcommand,
  globalConfigPaths,
  identityHint,
  makesCommits,
  parseConfigLines,
} from '../../src/workers/executors/git-identity.js';

const ALL_FALLBACK = {
  GIT_AUTHOR_NAME: 'orq',
  GIT_AUTHOR_EMAIL: 'orq@localhost',
  GIT_COMMITTER_NAME: 'orq',
  GIT_COMMITTER_EMAIL: 'orq@localhost',
};

describe("orq's fallback git identity", () => {
  it('is all of orq <orq@localhost> where neither the config nor the environment names one', () => {
    expect(fallbackIdentityEnv({}, {})).toEqual(ALL_FALLBACK);
  });

  it('is nothing where the config names user.name and user.email', () => {
    const config = { 'user.name': 'Alice', 'user.email': 'alice@example.com' };
    expect(fallbackIdentityEnv(config, {})).toEqual({});
  });

  it('fills only the half the config leaves out', () => {
    expect(fallbackIdentityEnv({ 'user.name': 'Alice' }, {})).toEqual({
      GIT_AUTHOR_EMAIL: 'orq@localhost',
      GIT_COMMITTER_EMAIL: 'orq@localhost',
    });
    expect(fallbackIdentityEnv({ 'author.name': 'A', 'author.email': 'a@x' }, {})).toEqual({
      GIT_COMMITTER_NAME: 'orq',
      GIT_COMMITTER_EMAIL: 'orq@localhost',
    });
  });

  it("leaves the environment's identity alone, EMAIL included", () => {
    const env = { GIT_AUTHOR_NAME: 'Bot', GIT_COMMITTER_NAME: 'Bot', EMAIL: 'bot@example.com' };
    expect(fallbackIdentityEnv({}, env)).toEqual({});
    expect(fallbackIdentityEnv({}, { GIT_COMMITTER_EMAIL: 'c@x' })).toEqual({
      GIT_AUTHOR_NAME: 'orq',
      GIT_AUTHOR_EMAIL: 'orq@localhost',
      GIT_COMMITTER_NAME: 'orq',
    });
  });

  it('counts an empty value as none, as git does', () => {
    expect(fallbackIdentityEnv({ 'user.name': '', 'user.email': ' ' }, { EMAIL: '' })).toEqual(
      ALL_FALLBACK,
    );
  });

  it('reads `git config --get-regexp` output, the last value of a key winning', () => {
    expect(
      parseConfigLines('user.name Alice Smith\nuser.email a@x\nuser.name Bob\nuser.email\n'),
    ).toEqual({ 'user.name': 'Bob', 'user.email': '' });
    expect(parseConfigLines('User.Name Alice')).toEqual({ 'user.name': 'Alice' });
  });
});

describe('git commands that make commits', () => {
  it('are found after the global options', () => {
    expect(gitSubcommand(['-c', 'user.name=x', '-C', '/repo', 'commit', '-m', 'x'])).toBe('commit');
    expect(gitSubcommand(['--no-pager', 'log'])).toBe('log');
  });

  it('are commit, commit-tree, merge, tag, notes, rebase, cherry-pick and the like', () => {
    for (const command of ['commit', 'commit-tree', 'merge', 'tag', 'notes', 'rebase']) {
      expect(makesCommits([command]), command).toBe(true);
    }
    expect(makesCommits(['cherry-pick', 'abc'])).toBe(true);
    for (const command of ['rev-parse', 'diff', 'worktree', 'update-ref', 'add', 'status']) {
      expect(makesCommits([command]), command).toBe(false);
    }
  });
});

describe('a commit git refuses for want of an identity', () => {
  it('gets a hint naming user.name, user.email and the fallback', () => {
    const stderr =
      "Author identity unknown\n\n*** Please tell me who you are.\n…\nfatal: unable to auto-detect email address (got 'root@vm.(none)')";
    expect(identityHint(stderr)).toMatch(
      /Set user\.name and user\.email of the repository .*orq's fallback identity orq <orq@localhost>/,
    );
    expect(identityHint('fatal: name consists only of disallowed characters: .')).toBeDefined();
  });

  it('and no other failure does', () => {
    expect(identityHint('CONFLICT (content): Merge conflict in a.txt')).toBeUndefined();
  });
});

describe('the global git config a coding agent gets where git has no identity', () => {
  it('gives the fallback identity first, then includes the real global config files, which win', () => {
    expect(fallbackGlobalConfig(['/home/ada/.config/git/config', '/home/ada/.gitconfig'])).toBe(
      [
        "# orq's fallback identity for the agent's own commits (git-identity.ts); the files below win",
        '[user]',
        '\tname = orq',
        '\temail = orq@localhost',
        '[include]',
        '\tpath = "/home/ada/.config/git/config"',
        '[include]',
        '\tpath = "/home/ada/.gitconfig"',
        '',
      ].join('\n'),
    );
  });

  it('quotes a path with quotes or backslashes, and leaves out one git could not read back', () => {
    const config = fallbackGlobalConfig(['/tmp/a "b"\\c', '/tmp/two\nlines']);
    expect(config).toContain('\tpath = "/tmp/a \\"b\\"\\\\c"\n');
    expect(config).not.toContain('two');
  });

  it('includes what git reads: GIT_CONFIG_GLOBAL alone, else the XDG file then ~/.gitconfig', () => {
    expect(globalConfigPaths({ GIT_CONFIG_GLOBAL: '/etc/pod.gitconfig' }, '/home/ada')).toEqual([
      '/etc/pod.gitconfig',
    ]);
    expect(globalConfigPaths({ XDG_CONFIG_HOME: '/xdg' }, '/home/ada')).toEqual([
      '/xdg/git/config',
      '/home/ada/.gitconfig',
    ]);
    expect(globalConfigPaths({}, '/home/ada')).toEqual([
      '/home/ada/.config/git/config',
      '/home/ada/.gitconfig',
    ]);
  });
});
