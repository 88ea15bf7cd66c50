import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

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

let repoCount = 0;
/** A fresh repository under `parent` on `main`, holding one commit of a README. */
export function makeRepo(parent: string): string {
  const repo = join(parent, `repo${++repoCount}`);
  mkdirSync(repo);
  git(['init', '-q'], repo);
  writeFileSync(join(repo, 'README.md'), '# project\n');
  git(['add', '-A'], repo);
  git(['commit', '-q', '-m', 'initial'], repo);
  return repo;
}
