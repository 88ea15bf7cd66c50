import { Redis } from 'ioredis';
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
  const target = redis as unknown as Connection;
  const original = target.sendCommand.bind(redis);
  target.sendCommand = (command: Command, stream?: unknown) => {
    onSend(commandName(target, command), command.promise);
    return original(command, stream);
  };
}

type Command = { name: string; args: unknown[]; promise: Promise<unknown> };
type Connection = {
  sendCommand(command: Command, stream?: unknown): unknown;
  scriptsSet?: Record<string, { sha: string }>;
};

/** Script names by SHA, as the connections that defined them know them. */
const scriptNames = new Map<string, string>();

/** A command's name; EVALSHA's is its script's, looked up on the connection that sends it. */
function commandName(connection: Connection, command: Command): string {
  if (command.name !== 'evalsha') return command.name;
  const sha = String(command.args[0]);
  if (!scriptNames.has(sha)) {
    for (const [name, script] of Object.entries(connection.scriptsSet ?? {})) {
      scriptNames.set(script.sha, name);
    }
  }
  return `script:${scriptNames.get(sha) ?? 'evalsha'}`;
}

/**
 * Counts the commands every ioredis connection of this process sends (BullMQ's workers' own,
 * their blocking fetches, the roles' shared one), but those of `except`, into the tally given
 * to `into` (none: not counted). The bench runs one side at a time, so each side's commands
 * per task are every round trip it makes. `restore` puts ioredis back as it was.
 */
export function countEveryConnection(except: readonly object[]): {
  into(tally: CommandTally | undefined): void;
  restore(): void;
} {
  const proto = Redis.prototype as unknown as Connection;
  const original = proto.sendCommand;
  let current: CommandTally | undefined;
  proto.sendCommand = function (this: Connection, command: Command, stream?: unknown) {
    if (current && !except.includes(this)) current.count(commandName(this, command));
    return original.call(this, command, stream);
  };
  return {
    into: (tally) => {
      current = tally;
    },
    restore: () => {
      proto.sendCommand = original;
    },
  };
}

/** A tally of command names, for counting over a whole run. */
export class CommandTally {
  counts: Record<string, number> = {};

  attach(redis: RedisConnection): void {
    countCommands(redis, (name) => this.count(name));
  }

  count(name: string): void {
    this.counts[name] = (this.counts[name] ?? 0) + 1;
  }

  take(): Record<string, number> {
    const counts = this.counts;
    this.counts = {};
    return counts;
  }
}
