import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { z } from 'zod';

/**
 * The process group of a coding agent a task runs, kept in a file beside its worktree while it
 * runs. A pod killed with `kill -9` leaves its agent running (it has a process group of its
 * own); the redelivered job finds the file and stops that agent before it opens the worktree
 * again, so two agents never write one worktree.
 */
const AgentRecord = z.object({
  pid: z.number().int().positive(),
  /** The leader's start time (/proc/<pid>/stat field 22): a reused pid is not the agent. */
  start: z.string().min(1),
});

/** Beside the worktree `<root>/<session>/<task>`; `~` is in no task id, so no task's folder. */
export const agentRecordPath = (worktreePath: string): string => `${worktreePath}~agent.json`;

/**
 * When process `pid` started (clock ticks since boot), or undefined when it is not running
 * (gone, or a zombie waiting for its parent).
 */
export function processStart(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which may hold spaces and ends with ')': the third on.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[0] === 'Z' ? undefined : fields[19];
  } catch {
    return undefined;
  }
}

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
};

/** Records the agent's group (its leader `pid`); without /proc nothing is recorded. */
export function recordAgent(file: string, pid: number): void {
  const start = processStart(pid);
  if (start === undefined) return;
  writeFileSync(file, JSON.stringify({ pid, start }));
}

/**
 * Removes the record; with `pid`, only while it is that agent's: a delivery that lost its job
 * while its agent ran must not drop the record of the agent the job's new delivery started.
 */
export function forgetAgent(file: string, pid?: number): void {
  if (pid !== undefined) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      return;
    }
    if (AgentRecord.safeParse(parseJson(text)).data?.pid !== pid) return;
  }
  rmSync(file, { force: true });
}

/** How long a killed group's leader gets to be gone before the worktree is opened anyway. */
const GONE_WITHIN_MS = 5_000;

/**
 * Stops the agent an earlier delivery left running, if its record names a process that is
 * still that agent. Returns a note for the task's log when it stopped one.
 */
export async function stopLeftoverAgent(file: string): Promise<string | undefined> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return undefined; // No record: no agent left running.
  }
  forgetAgent(file);
  const record = AgentRecord.safeParse(parseJson(text)).data;
  if (!record || processStart(record.pid) !== record.start) return undefined;
  try {
    process.kill(-record.pid, 'SIGKILL');
  } catch {
    return undefined;
  }
  const deadline = Date.now() + GONE_WITHIN_MS;
  while (processStart(record.pid) === record.start && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
  }
  return `stopped the agent an earlier delivery left running (process group ${record.pid})`;
}
