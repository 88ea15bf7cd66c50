import { execFileSync } from 'node:child_process';

/**
 * git as the tests' own hand: with an identity of its own on the command line (set for this
 * command only, never in the repository, so orq's commits there find none, as in a pod:
 * tests/support/bare-git.ts) and `main` as the first branch. Returns stdout, trimmed.
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
