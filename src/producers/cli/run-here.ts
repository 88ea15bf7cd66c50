import type { OrqConfig, SessionConfig } from '../../shared/config/schema.js';
import { loadScenarioFile } from '../../shared/config/scenario.js';
import { createLogger } from '../../shared/logger.js';
import type { Role } from '../../shared/queues.js';
import { requireApiKeys } from '../../workers/models.js';
import { launchRoles } from '../../workers/registry.js';
import { keyVariables, takeProviderKeys } from '../../shared/config/provider-keys.js';
import { openClient, type OrqClient } from '../client.js';
import { cliConfig, printJson } from './common.js';
import { followMode, followSession, reportOutcome, stopOnSignals } from './follow.js';
import { deriveSessionResult } from '../../shared/rules/session-result.js';
import { formatSessionTable } from './format.js';
import { LogRelay } from './log-relay.js';
import { privateRedisDir, redisForCli, type CliRedis } from './redis-for-cli.js';
import { formatResultSection } from './result-text.js';
import { withStdoutHeld } from './stdout-closed.js';

const ALL_ROLES: Role[] = ['planner', 'judge', 'worker', 'replanner', 'coordinator'];

export interface RunHereOptions {
  config?: string;
  /** Scripts the builtin provider (a new session's config; a resumed one keeps its own). */
  scenario?: string;
  json?: boolean;
  concurrency?: number;
  latency?: number;
  verbose?: boolean;
}

/** The session `start` submitted or resumed, and the history entry to follow it after. */
export interface Started {
  sessionId: string;
  after?: string;
}

export interface RunHereMode {
  /**
   * 'view' (default): the final table (or with --json the final session) after the progress;
   * 'history': only the history, as `watch` prints it (with --json as JSON lines).
   */
  output?: 'view' | 'history';
  /** Checks the config before any Redis or role starts; throws to refuse the command. */
  preflight?: (config: OrqConfig) => void;
  /** `start` submits the config's own session settings: a refusal is the config's (cliConfig). */
  submitChecks?: boolean;
  /**
   * Checks the session once Redis answers, before the roles start; throws to refuse. False: no
   * role would move the session (finished, or stopped with nothing pending), so none starts:
   * they would only take other sessions' queued jobs while the command reports this one.
   */
  beforeRoles?: (client: OrqClient) => Promise<boolean>;
  /**
   * The command is about a session that exists already (`resume --run`, `watch --run`): without
   * REDIS_URL and with no private Redis here it says there is none, rather than start an empty
   * server to find no session in and leave .orq/ behind.
   */
  existing?: boolean;
}

/**
 * What a session run here would fail on that can be told before its roles start: a scenario
 * file that does not load, an API key that is not set. Every role runs in this process, so no
 * other pod can have the key, and each would fail the session only after its job's retries.
 */
export function checkRunnable(config: SessionConfig): void {
  if (config.llm.scenario) loadScenarioFile(config.llm.scenario);
  requireApiKeys(config);
}

/** What `orq run` says of the private Redis it started or took over (nothing for a shared one). */
export function privateRedisStartNotice(redis: CliRedis): string | undefined {
  const where = `(data in ${privateRedisDir()})`;
  if (redis.adopted) {
    return `orq: took over the private redis-server at ${redis.url} that an earlier orq left running ${where}\n`;
  }
  if (redis.owned) return `orq: started a private redis-server at ${redis.url} ${where}\n`;
  return undefined;
}

/**
 * Every role in this process for one session (`orq run`, `orq resume --run`, `orq watch --run`):
 * `start` submits or resumes it once the roles run, then its progress is followed until it ends
 * or blocks, and the outcome is told on stderr and in the exit code. Without REDIS_URL this is
 * orq's private Redis, started for the command (or reused) and stopped after it.
 */
export async function runHere(
  options: RunHereOptions,
  start: (client: OrqClient, out: NodeJS.WritableStream) => Promise<Started>,
  { output = 'view', preflight, beforeRoles, submitChecks, existing }: RunHereMode = {},
): Promise<void> {
  const config = cliConfig(options, { submitChecks });
  // Before the private redis-server starts: it would inherit the provider keys (issue 41).
  takeProviderKeys(keyVariables(config));
  preflight?.(config);
  // With --json, stdout carries only JSON: what this command says goes to stderr.
  const out = options.json ? process.stderr : process.stdout;
  const history = output === 'history';
  const logs = new LogRelay(process.stderr);
  const logger = createLogger({ level: options.verbose ? 'info' : 'warn', destination: logs });
  // Until the private Redis is released: a reader gone before the roles start, or at the last
  // write, must not exit this command with its server left running (stdout-closed.ts).
  await withStdoutHeld(runWithRedis);

  async function runWithRedis(): Promise<void> {
    const redis = await redisForCli(config, { existing });
    try {
      const notice = privateRedisStartNotice(redis);
      if (notice) out.write(notice);
      // The client first: it says at once that Redis does not answer, where the roles' consumers
      // would wait for it for ever.
      const client = await openClient({ connection: redis.connection, config }, 'REDIS_URL');
      try {
        const rolesNeeded = (await beforeRoles?.(client)) ?? true;
        const pod = rolesNeeded ? await startAllRoles() : undefined;
        const stop = stopOnSignals();
        try {
          const { sessionId, after } = await start(client, out);
          const progress = history ? process.stdout : out;
          const mode = followMode(progress, history && options.json);
          const view = await followSession(client, sessionId, {
            mode,
            out: progress,
            signal: stop.signal,
            logs,
            ...(after ? { after } : {}),
          });
          if (!history && options.json) printJson(view);
          else if (!history) {
            // The live frame already shows the table; plain progress ends with it.
            if (mode !== 'live') out.write(`\n${formatSessionTable(view)}\n`);
            // What the session produced, from the view just read (orq result gives it later).
            out.write(`\n${formatResultSection(deriveSessionResult(view.session, view.tasks))}\n`);
          }
          // Nothing runs the roles once this command ends: a resume is to be run here too.
          process.exitCode = reportOutcome(view, stop.interrupted(), { resumeHere: true });
        } finally {
          stop.dispose();
          await pod?.close(10_000);
        }
      } finally {
        await client.close();
      }
    } finally {
      await redis.release();
    }

    function startAllRoles() {
      return launchRoles(
        {
          roles: ALL_ROLES,
          connection: redis.connection,
          config,
          logger,
          ...(options.concurrency ? { concurrency: options.concurrency } : {}),
          ...(options.latency !== undefined ? { latencyMs: options.latency } : {}),
        },
        'REDIS_URL',
      );
    }
  }
}
