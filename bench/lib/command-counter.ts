import type { RedisConnection } from '../../src/shared/redis.js';

/**
 * Counts the commands one ioredis connection sends, by name; EVALSHA is named after its script
 * (`script:orqApply`, `script:addStandardJob:5.x`). `onSend` sees each command and its reply
 * promise (to time round trips). Wraps the connection's own sendCommand: nothing else changes.
 */
export function countCommands(
  redis: RedisConnection,
  onSend: (name: string, reply: Promise<unknown>) => void,
): void {
  type Command = { name: string; args: unknown[]; promise: Promise<unknown> };
  const target = redis as unknown as {
    sendCommand(command: Command, stream?: unknown): unknown;
    scriptsSet?: Record<string, { sha: string }>;
  };
  const original = target.sendCommand.bind(redis);
  const scriptNames = new Map<string, string>();
  const scriptName = (sha: unknown): string => {
    if (!scriptNames.has(String(sha))) {
      for (const [name, script] of Object.entries(target.scriptsSet ?? {})) {
        scriptNames.set(script.sha, name);
      }
    }
    return scriptNames.get(String(sha)) ?? 'evalsha';
  };
  target.sendCommand = (command: Command, stream?: unknown) => {
    const name =
      command.name === 'evalsha' ? `script:${scriptName(command.args[0])}` : command.name;
    onSend(name, command.promise);
    return original(command, stream);
  };
}

/** A tally of command names, for counting over a whole run. */
export class CommandTally {
  counts: Record<string, number> = {};

  attach(redis: RedisConnection): void {
    countCommands(redis, (name) => {
      this.counts[name] = (this.counts[name] ?? 0) + 1;
    });
  }

  take(): Record<string, number> {
    const counts = this.counts;
    this.counts = {};
    return counts;
  }
}
