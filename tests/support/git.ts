import { execFileSync } from 'node:child_process';

/**
 * git with a local identity and `main` as the first branch: the tests never rely on a global
 * git config. Returns stdout, trimmed.
 */
export function git(args: string[], cwd: string): string {
  return execFileSync(
    'git',
    [
      '-c',
      'user.name=orq-test',
      '-c',
      'user.email=orq-test@example.com',
      '-c',
      'init.defaultBranch=main',
      ...args,
    ],
    { cwd, encoding: 'utf8' },
  ).trim();
}
