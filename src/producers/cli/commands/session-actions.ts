import { integrationResumable } from '../../../shared/rules/integration-plan.js';
import {
  RESUMABLE_SESSION_STATES,
  type Session,
  type SessionState,
} from '../../../shared/domain/session.js';
import { OrqError } from '../../../shared/errors.js';
import type { OrqClient, ResumeRequest, SessionView } from '../../client.js';
import { fairnessOptions } from '../options.js';
import {
  cliConfig,
  printJson,
  sessionOverrides,
  submittedSessionConfig,
  withClient,
  withSessions,
} from '../common.js';
import {
  followMode,
  followSession,
  reportOutcome,
  stopOnSignals,
  waitsForRoles,
} from '../follow.js';
import {
  formatHistoryEntry,
  formatQuotas,
  formatSessionList,
  formatTenantLoad,
  formatWaitingList,
  formatSessionTable,
  missingRolesNotice,
} from '../format.js';
import { nothingRunHere, privateRedisDir } from '../redis-for-cli.js';
import { submittedScenarioNotice } from '../scenario-notice.js';
import { withStdoutHeld } from '../stdout-closed.js';

// The session commands' actions, loaded when one runs (commands/sessions.ts declares them). The
// roles (run-here.js) load only for `--run`.
const runHereModule = () => import('../run-here.js');

export interface SubmitOptions {
  config?: string;
  scenario?: string;
  sessionConfig?: string;
  idempotencyKey?: string;
  tenant?: string;
  priority?: number;
  json?: boolean;
}

export interface StatusOptions {
  config?: string;
  limit: number;
  json?: boolean;
}

export interface WatchOptions {
  config?: string;
  json?: boolean;
  run?: boolean;
}

export interface CancelOptions {
  config?: string;
  reason: string;
}

export interface HistoryOptions {
  config?: string;
  jsonl?: boolean;
  json?: boolean;
}

/** Says so on stderr when a role a session needs runs nowhere on this Redis and prefix. */
async function warnOfMissingRoles(client: OrqClient, sessionId: string, prefix: string) {
  const notice = missingRolesNotice(sessionId, await client.consumers(), prefix);
  if (notice) process.stderr.write(`orq: ${notice}\n`);
}

/**
 * A `--run` command's check before its roles start: the session's own config, when the session
 * is in a state the roles would run it from. Any other is left to the command to report, with
 * no role started (false).
 */
function runnableWhen(
  sessionId: string,
  runs: (state: SessionState, client: OrqClient) => boolean | Promise<boolean>,
) {
  return async (client: OrqClient): Promise<boolean> => {
    const { session } = await client.get(sessionId);
    if (!(await runs(session.state, client))) return false;
    (await runHereModule()).checkRunnable(session.config);
    return true;
  };
}

export interface ResumeOptions {
  config?: string;
  skip?: boolean;
  note?: string;
  task?: string[];
  maxTokens?: number;
  maxUsd?: number;
  run?: boolean;
  json?: boolean;
}

function resumeRequest(options: ResumeOptions): ResumeRequest {
  const budget = {
    ...(options.maxTokens !== undefined ? { maxTokens: options.maxTokens } : {}),
    ...(options.maxUsd !== undefined ? { maxUsd: options.maxUsd } : {}),
  };
  // `--note ""` is a mistake, not a request to retry instead.
  if (options.note !== undefined && options.note.trim() === '') {
    throw new OrqError(
      'VALIDATION_FAILED',
      '--note needs a text: the feedback the tasks go on with',
      {
        hint: 'Give the note (--note "the credentials are fixed"), or leave --note out to retry the tasks as they are.',
      },
    );
  }
  return {
    mode: options.skip ? 'skip' : options.note !== undefined ? 'continue' : 'retry',
    ...(options.task ? { taskIds: options.task } : {}),
    ...(options.note !== undefined ? { note: options.note } : {}),
    ...(Object.keys(budget).length > 0 ? { budget } : {}),
  };
}

/** `orq submit`: enqueues a session for the roles running elsewhere (or later, with --run). */
export async function submit(instruction: string, options: SubmitOptions): Promise<void> {
  // Bad JSON is a usage error before any Redis starts.
  const overrides = sessionOverrides(options.sessionConfig);
  // Without --session-config the session's settings are the configuration's, and so are
  // the errors a submit would find in them.
  const loaded = cliConfig(options, { submitChecks: overrides === undefined });
  const scenarioNotice = submittedScenarioNotice(
    submittedSessionConfig(loaded, overrides, options),
    Boolean(loaded.redis.url),
  );
  if (scenarioNotice) process.stderr.write(scenarioNotice);
  return withClient(
    options,
    async (client, config) => {
      const session = await client.submit({
        instruction,
        ...(overrides ? { config: overrides } : {}),
        ...(options.idempotencyKey !== undefined ? { idempotencyKey: options.idempotencyKey } : {}),
        ...fairnessOptions(options),
      });
      if (options.json) printJson(session);
      else process.stdout.write(`${session.id}\n`);
      // Pods do not share the private Redis: say how the session gets run.
      if (!config.redis.url) {
        process.stderr.write(
          `orq: REDIS_URL is not set: the session is in the private Redis in ${privateRedisDir()}, where only ` +
            `\`orq run\` and the \`--run\` commands run roles; run it with \`orq watch ${session.id} --run\`, ` +
            `or submit with REDIS_URL set to your roles' Redis\n`,
        );
      }
    },
    { config: loaded },
  );
}

/** `orq status`: a session's table, or the list of sessions. */
export async function status(sessionId: string | undefined, options: StatusOptions): Promise<void> {
  const loaded = cliConfig(options);
  const printList = (sessions: Session[], nothingRun?: { privateRedis: string }) => {
    if (options.json) printJson(sessions);
    else process.stdout.write(`${formatSessionList(sessions, nothingRun)}\n`);
  };
  // No sessions is an answer, not an error, as on a REDIS_URL holding none: the empty list,
  // without starting a server (and leaving .orq/ behind) only to find it empty.
  if (sessionId === undefined && nothingRunHere(loaded)) {
    printList([], { privateRedis: privateRedisDir() });
    return;
  }
  await withSessions(
    options,
    async (client, config, redis) => {
      // `orq status ""` is a malformed id (client.get says so), not a request for the list.
      if (sessionId === undefined) {
        printList(await client.list({ limit: options.limit }));
        // Who waits for a person, under the list: the sessions a reader may have to act on.
        if (!options.json) {
          const waiting = formatWaitingList(await client.waiting());
          if (waiting) process.stdout.write(`\n${waiting}\n`);
        }
        // Under the list: what each tenant has in the queues now (fair release) and each
        // provider limit. The list's JSON stays the plain array it always printed; GET /tenants
        // and GET /quotas give those as JSON.
        if (!options.json) {
          const tenants = formatTenantLoad(await client.tenants());
          if (tenants) process.stdout.write(`\n${tenants}\n`);
          const quotas = await client.quotas();
          if (quotas.length > 0) process.stdout.write(`\n${formatQuotas(quotas)}\n`);
        }
        return;
      }
      const view = await client.get(sessionId);
      if (options.json) printJson(view);
      else process.stdout.write(`${formatSessionTable(view)}\n`);
      // A private Redis this command started has no roles by design: nothing to warn of.
      if (!redis.owned && waitsForRoles(view.session.state)) {
        await warnOfMissingRoles(client, sessionId, config.redis.prefix);
      }
    },
    { config: loaded },
  );
}

/** `orq watch`: follows a session to its end (running the roles here with --run). */
export async function watch(sessionId: string, options: WatchOptions): Promise<void> {
  return options.run
    ? (await runHereModule()).runHere(options, async () => ({ sessionId }), {
        output: 'history',
        existing: true,
        // A stopped session with a resume or cancel not applied yet runs too, once the
        // coordinator here applies it (what a plain `orq watch` of it says to run).
        beforeRoles: runnableWhen(
          sessionId,
          async (state, client) => waitsForRoles(state) || (await client.requestPending(sessionId)),
        ),
      })
    : withStdoutHeld(() =>
        withSessions(options, async (client, config, redis) => {
          const waiting = await client.get(sessionId);
          const { state } = waiting.session;
          // A blocked (or budget-stopped) session with a resume or cancel not applied yet
          // moves on once the coordinator applies it: the watch waits for the roles then too.
          const pending = !waitsForRoles(state) && (await client.requestPending(sessionId));
          // This command started the private Redis: no process runs roles on it, and the
          // session would never move. Finished and blocked ones are still shown.
          if (redis.owned && (waitsForRoles(state) || pending)) {
            // Which request waits is read only for this message.
            const resuming = pending && (await client.resumePending(sessionId));
            throw new OrqError(
              'INVALID_STATE',
              `Session ${sessionId} is ${state}${pending ? ` with a ${resuming ? 'resume' : 'cancel'} not applied yet` : ''}, and no roles run on the private Redis in ${privateRedisDir()} (REDIS_URL is not set)`,
              {
                hint: `Run it here with \`orq watch ${sessionId} --run\`, or set REDIS_URL to your roles' Redis.`,
                details: { sessionId, state },
              },
            );
          }
          if (waitsForRoles(state) || pending) {
            await warnOfMissingRoles(client, sessionId, config.redis.prefix);
          }
          const stop = stopOnSignals();
          let view: SessionView;
          try {
            view = await followSession(client, sessionId, {
              mode: followMode(process.stdout, options.json),
              out: process.stdout,
              signal: stop.signal,
            });
          } finally {
            stop.dispose();
          }
          process.exitCode = reportOutcome(view, stop.interrupted());
        }),
      );
}

/** `orq resume`: asks the coordinator to go on with a blocked or budget-stopped session. */
export async function resume(sessionId: string, options: ResumeOptions): Promise<void> {
  if (options.json && !options.run) {
    throw new OrqError('VALIDATION_FAILED', '--json prints the final session of --run', {
      hint: `Add --run, or follow the session with \`orq watch ${sessionId} --json\`.`,
    });
  }
  const request = resumeRequest(options);
  const requested = `resume (${request.budget ? 'with a higher budget' : request.mode}) requested for ${sessionId}\n`;
  if (options.run) {
    await (
      await runHereModule()
    ).runHere(
      options,
      async (client, out) => {
        const after = await client.store.lastHistoryId(sessionId);
        // The roles run here: wait for the coordinator to apply the request before following.
        await client.resume(sessionId, request, { waitMs: 30_000 });
        out.write(`orq: ${requested}`);
        return { sessionId, ...(after ? { after } : {}) };
      },
      {
        existing: true,
        // A FAILED session resumes when its integration failed; the client refuses the others.
        beforeRoles: runnableWhen(
          sessionId,
          (state) => RESUMABLE_SESSION_STATES.includes(state) || state === 'FAILED',
        ),
      },
    );
    return;
  }
  await withSessions(options, async (client, config) => {
    const { session } = await client.get(sessionId);
    const resumable =
      RESUMABLE_SESSION_STATES.includes(session.state) || integrationResumable(session);
    // On the private Redis only `--run` commands (or pods pointed at it) run a coordinator:
    // without one nothing would apply the request, and a later `--run` would find it queued
    // before its own. A session that cannot be resumed is left to the client to refuse.
    if (!config.redis.url && resumable && (await client.consumers()).coordinator === 0) {
      throw new OrqError(
        'INVALID_STATE',
        `Session ${sessionId} is ${session.state}, and no coordinator runs on the private Redis in ${privateRedisDir()} (REDIS_URL is not set): nothing would apply the resume`,
        {
          hint: `Resume it here with \`orq resume ${sessionId} --run\` (and the same options), or set REDIS_URL to your roles' Redis.`,
          details: { sessionId, state: session.state },
        },
      );
    }
    await client.resume(sessionId, request);
    process.stdout.write(requested);
    if (config.redis.url) await warnOfMissingRoles(client, sessionId, config.redis.prefix);
  });
}

/** `orq cancel`: asks the coordinator to cancel a session. */
export function cancel(sessionId: string, options: CancelOptions): Promise<void> {
  return withSessions(options, async (client, config) => {
    await client.cancel(sessionId, options.reason);
    process.stdout.write(`cancel requested for ${sessionId}\n`);
    // Only a coordinator applies a cancel: without one the session stays as it is, and a
    // `delete` after it would be refused as if no cancel had been asked for.
    if ((await client.consumers()).coordinator === 0) {
      process.stderr.write(
        config.redis.url
          ? `orq: no process runs the coordinator role on this Redis under the prefix "${config.redis.prefix}", so the cancel waits until one does (\`orq start --roles coordinator\`). If your pods run, check that they use the same REDIS_URL and ORQ_PREFIX.\n`
          : `orq: no coordinator runs on the private Redis in ${privateRedisDir()} (REDIS_URL is not set), so the cancel waits: \`orq watch ${sessionId} --run\` applies it here.\n`,
      );
    }
  });
}

/** `orq history`: every entry of a session's history. */
export function history(sessionId: string, options: HistoryOptions): Promise<void> {
  return withSessions(options, async (client) => {
    if (options.jsonl) {
      process.stdout.write(await client.historyJsonl(sessionId));
      return;
    }
    const entries = await client.history(sessionId);
    if (options.json) {
      printJson(entries.map(({ entry }) => entry));
      return;
    }
    for (const { entry } of entries) {
      process.stdout.write(`${formatHistoryEntry(entry)}\n`);
    }
  });
}
