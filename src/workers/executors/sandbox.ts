import { spawnSync } from 'node:child_process';
import { realpathSync } from 'node:fs';
import { keyFiles } from '../../shared/config/provider-keys.js';

/**
 * What run_command's programs are kept from (issue 41). An allowlisted `cat` could read
 * /proc/<pod>/environ, the pod's API keys with it, since it ran as the pod's user in the pod's
 * view of processes. In a sandbox a program runs in a PID namespace of its own with its own
 * /proc: it sees only the processes it started, so no other process's environment or memory.
 * The files the pod reads provider keys from (`<VAR>_FILE`) are covered by /dev/null in its
 * mount namespace: it reads them empty. It still reads and writes every other file the pod's
 * user may, and reaches the network: bound those with the container (read-only mounts, a
 * network policy).
 */

export type SandboxSetting = 'auto' | 'required' | 'off';

export interface Sandbox {
  /** bwrap (bubblewrap), unshare (util-linux), or none. */
  kind: 'bwrap' | 'unshare' | 'none';
  /**
   * The argv to spawn for the program's argv, with the files in `hidden` read as empty: by
   * default the provider key files of this process (provider-keys.ts keyFiles).
   */
  wrap(argv: readonly string[], hidden?: readonly string[]): string[];
  /** For the task's log: what isolates the programs, or why nothing does. */
  describe: string;
}

const CANDIDATES: readonly { kind: 'bwrap' | 'unshare'; prefix: readonly string[] }[] = [
  {
    kind: 'bwrap',
    prefix: [
      'bwrap',
      '--dev-bind',
      '/',
      '/',
      '--unshare-pid',
      '--proc',
      '/proc',
      '--die-with-parent',
      '--',
    ],
  },
  // Without root, a user namespace is what lets unshare make the others; --map-root-user keeps
  // the files the program writes owned by the pod's user.
  {
    kind: 'unshare',
    prefix: [
      'unshare',
      '--user',
      '--map-root-user',
      '--pid',
      '--fork',
      '--mount-proc',
      '--kill-child',
      '--',
    ],
  },
  // As root (a pod's default in many images), where user namespaces are turned off.
  { kind: 'unshare', prefix: ['unshare', '--pid', '--fork', '--mount-proc', '--kill-child', '--'] },
];

const NONE: Sandbox = {
  kind: 'none',
  wrap: (argv) => [...argv],
  describe:
    'none: neither bwrap nor unshare can make a PID namespace here, so a command can read the environment and memory of the pod and its key files (its API keys); run the pod in a container with only the keys it needs, or allow user namespaces',
};

/**
 * Run by `sh` inside unshare's namespaces, before the program: `n`, n paths, then the program's
 * argv. A bind mount there changes only the sandbox's view (unshare makes its mounts private).
 * A file that cannot be covered stops the command: running it would show the key.
 */
const HIDE_THEN_EXEC = `n=$1; shift
while [ "$n" -gt 0 ]; do
  mount --bind /dev/null "$1" 2>/dev/null || { echo "orq sandbox: cannot hide the key file $1, so the command was not run" >&2; exit 126; }
  shift; n=$((n - 1))
done
exec "$@"`;

/** The real paths of the files to hide that exist (a path that does not holds nothing). */
function existing(paths: readonly string[]): string[] {
  const real = paths.flatMap((path) => {
    try {
      // A Kubernetes secret file is a link into a dated directory: cover the file itself.
      return [realpathSync(path)];
    } catch {
      return [];
    }
  });
  return [...new Set(real)];
}

/** `argv` under a sandbox's `prefix` (which ends with `--`), with `hidden` covered. */
function wrapIn(
  kind: 'bwrap' | 'unshare',
  prefix: readonly string[],
  argv: readonly string[],
  hidden: readonly string[],
): string[] {
  const files = existing(hidden);
  if (files.length === 0) return [...prefix, ...argv];
  if (kind === 'bwrap') {
    // --dev-bind: under --ro-bind's nodev, /dev/null cannot be opened (the read fails instead
    // of finding nothing). Writes to it are discarded; the key file is untouched either way.
    const covers = files.flatMap((file) => ['--dev-bind', '/dev/null', file]);
    return [...prefix.slice(0, -1), ...covers, '--', ...argv];
  }
  return [
    ...prefix,
    'sh',
    '-c',
    HIDE_THEN_EXEC,
    'orq-sandbox',
    String(files.length),
    ...files,
    ...argv,
  ];
}

let detected: Sandbox | undefined;

/** Whether `prefix true` runs: the tool exists and the kernel lets it make its namespaces. */
function works(prefix: readonly string[]): boolean {
  const [program, ...args] = prefix;
  const result = spawnSync(program!, [...args, 'true'], { stdio: 'ignore', timeout: 5_000 });
  return result.status === 0;
}

/** The first sandbox that works on this machine, probed once per process. */
export function detectSandbox(): Sandbox {
  if (detected) return detected;
  const found = CANDIDATES.find((candidate) => works(candidate.prefix));
  detected = found
    ? {
        kind: found.kind,
        wrap: (argv, hidden = keyFiles()) => wrapIn(found.kind, found.prefix, argv, hidden),
        describe: `${found.kind}: each command in a PID namespace of its own (it cannot see the pod's processes, their environment or memory, nor the provider key files; it can read and write the other files the pod's user can)`,
      }
    : NONE;
  return detected;
}

/** The sandbox for a setting: `off` never, `auto` where one works, `required` or an error. */
export function sandboxFor(setting: SandboxSetting): Sandbox | { error: string } {
  if (setting === 'off') {
    return { ...NONE, describe: "off (execution.toolSandbox): commands see the pod's processes" };
  }
  const sandbox = detectSandbox();
  if (setting === 'required' && sandbox.kind === 'none') {
    return {
      error: `execution.toolSandbox is required, but ${sandbox.describe.replace(/^none: /, '')}`,
    };
  }
  return sandbox;
}
