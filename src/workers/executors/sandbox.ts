import { spawnSync } from 'node:child_process';

/**
 * What run_command's programs are kept from (issue 41). An allowlisted `cat` could read
 * /proc/<pod>/environ, the pod's API keys with it, since it ran as the pod's user in the pod's
 * view of processes. In a sandbox a program runs in a PID namespace of its own with its own
 * /proc: it sees only the processes it started, so no other process's environment or memory.
 * It still reads and writes every file the pod's user may, and reaches the network: bound
 * those with the container (read-only mounts, a network policy).
 */

export type SandboxSetting = 'auto' | 'required' | 'off';

export interface Sandbox {
  /** bwrap (bubblewrap), unshare (util-linux), or none. */
  kind: 'bwrap' | 'unshare' | 'none';
  /** The argv to spawn for the program's argv. */
  wrap(argv: readonly string[]): string[];
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
    'none: neither bwrap nor unshare can make a PID namespace here, so a command can read the environment and memory of the pod (its API keys); run the pod in a container with only the keys it needs, or allow user namespaces',
};

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
        wrap: (argv) => [...found.prefix, ...argv],
        describe: `${found.kind}: each command in a PID namespace of its own (it cannot see the pod's processes, their environment or memory; it can read and write what the pod's user can)`,
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
