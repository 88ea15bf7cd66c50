/**
 * orq's fallback git identity: the author and committer of orq's commits (and merges, record
 * commits...) where neither the repository's git config nor the environment names one, as in a
 * pod whose HOME has no git config. Pure: git-worktree.ts reads the config and runs git.
 */
export const FALLBACK_IDENTITY = { name: 'orq', email: 'orq@localhost' } as const;

/**
 * git commands that make commits or tags, which git refuses to make without an identity
 * ("Author identity unknown"). Every other command orq runs needs none.
 */
const MAKES_COMMITS = new Set([
  'am',
  'cherry-pick',
  'commit',
  'commit-tree',
  'merge',
  'notes',
  'pull',
  'rebase',
  'revert',
  'stash',
  'tag',
]);

/** The subcommand of a git argv: the first word after the global options (`-c k=v`, `-C dir`). */
export function gitSubcommand(args: readonly string[]): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '-c' || arg === '-C') i++;
    else if (!arg.startsWith('-')) return arg;
  }
  return undefined;
}

export const makesCommits = (args: readonly string[]): boolean =>
  MAKES_COMMITS.has(gitSubcommand(args) ?? '');

/** The config keys git takes an identity from, as `git config --get-regexp` prints them. */
export const IDENTITY_KEYS = String.raw`^(user|author|committer)\.(name|email)$`;

/**
 * The environment variables that give a git command orq's fallback identity, for each half of
 * it (author, committer; name, email) that neither the config (`configured`: key → value, keys
 * lower case) nor the environment gives. Empty when git has an identity of its own: a
 * configured one is never overridden. Empty values count as none, as they do for git.
 */
export function fallbackIdentityEnv(
  configured: Readonly<Record<string, string>>,
  env: NodeJS.ProcessEnv,
): Record<string, string> {
  const given = (...values: (string | undefined)[]) => values.some((v) => v?.trim());
  const result: Record<string, string> = {};
  for (const role of ['author', 'committer'] as const) {
    const ROLE = role.toUpperCase();
    if (!given(env[`GIT_${ROLE}_NAME`], configured[`${role}.name`], configured['user.name'])) {
      result[`GIT_${ROLE}_NAME`] = FALLBACK_IDENTITY.name;
    }
    const email = [env[`GIT_${ROLE}_EMAIL`], configured[`${role}.email`], configured['user.email']];
    // git takes EMAIL too, after the config.
    if (!given(...email, env.EMAIL)) result[`GIT_${ROLE}_EMAIL`] = FALLBACK_IDENTITY.email;
  }
  return result;
}

/** `git config --get-regexp` output → key (lower case) → value; a later line wins, as in git. */
export function parseConfigLines(stdout: string): Record<string, string> {
  const values: Record<string, string> = {};
  for (const line of stdout.split('\n')) {
    const match = /^(\S+)(?: (.*))?$/.exec(line);
    if (match) values[match[1]!.toLowerCase()] = match[2] ?? '';
  }
  return values;
}

/** What git prints when it has no usable identity for a commit. */
const IDENTITY_REFUSED =
  /Author identity unknown|Committer identity unknown|unable to auto-detect email address|empty ident name|name consists only of disallowed characters|invalid ident/i;

/**
 * The hint for a git command that failed for want of a usable identity, or undefined when that
 * is not why it failed.
 */
export function identityHint(stderr: string): string | undefined {
  if (!IDENTITY_REFUSED.test(stderr)) return undefined;
  return (
    'git has no usable identity for the commit. Set user.name and user.email of the repository ' +
    '(git config user.name "…" and git config user.email "…"), or remove the unusable ones so ' +
    `that orq's fallback identity ${FALLBACK_IDENTITY.name} <${FALLBACK_IDENTITY.email}> applies`
  );
}

/**
 * The global config files git reads when GIT_CONFIG_GLOBAL does not name one, in the order it
 * reads them (a later value wins): $XDG_CONFIG_HOME/git/config (else ~/.config/git/config),
 * then ~/.gitconfig. Just the one GIT_CONFIG_GLOBAL names when it is set.
 */
export function globalConfigPaths(env: NodeJS.ProcessEnv, home: string): string[] {
  if (env.GIT_CONFIG_GLOBAL !== undefined) return [env.GIT_CONFIG_GLOBAL];
  const xdg = env.XDG_CONFIG_HOME?.trim() ? env.XDG_CONFIG_HOME : `${home}/.config`;
  return [`${xdg}/git/config`, `${home}/.gitconfig`];
}

/** A value in a git config file, quoted: backslashes and double quotes escaped. */
const quoted = (value: string) => `"${value.replace(/[\\"]/g, (c) => `\\${c}`)}"`;

/**
 * The global git config a coding agent's process gets (GIT_CONFIG_GLOBAL) where git has no
 * identity of its own: orq's fallback identity, then the real global config files included
 * after it, so that git's own precedence applies as if the fallback were the lowest global
 * setting. The real global config, the repository's, `-c user.name=…` on the agent's own command
 * line and GIT_AUTHOR_* in its environment all win over it. (Environment variables given to
 * the agent instead would win over all of those.) An include of a missing file is skipped.
 */
export function fallbackGlobalConfig(includes: readonly string[]): string {
  return [
    "# orq's fallback identity for the agent's own commits (git-identity.ts); the files below win",
    '[user]',
    `\tname = ${FALLBACK_IDENTITY.name}`,
    `\temail = ${FALLBACK_IDENTITY.email}`,
    ...includes
      .filter((path) => !/[\n\r\0]/.test(path))
      .flatMap((path) => ['[include]', `\tpath = ${quoted(path)}`]),
    '',
  ].join('\n');
}
