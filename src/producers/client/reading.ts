/**
 * What a client reads without changing anything: a session with its tasks, pages of sessions,
 * a session's history and result, the sessions that wait for a person, and what the pods
 * report (consumers per role, provider quotas, tenants' load).
 */
import { SessionId, type Session } from '../../shared/domain/session.js';
import type { SessionResult } from '../../shared/domain/result.js';
import type { QuotaView } from '../../shared/domain/quota.js';
import { parseOrThrow } from '../../shared/errors.js';
import { builtinUse } from '../../shared/config/builtin-roles.js';
import { Role, ROLE_QUEUE } from '../../shared/queues.js';
import { isTransportError } from '../../shared/redis.js';
import { readRunningJobs } from '../../shared/running-progress.js';
import {
  deriveSessionResult,
  resultIsFinal,
  resultNotFinal,
} from '../../shared/rules/session-result.js';
import type { StoredHistoryEntry } from '../../shared/store/session-records.js';
import { formatCursor, parseCursor, type ListCursor } from '../../shared/store/session-index.js';
import { readTenantLoad, type TenantLoad } from '../../shared/store/tenant-load.js';
import type { ClientContext } from './context.js';
import {
  HistoryRequest,
  ListRequest,
  ResultRequest,
  type SessionPage,
  type SessionView,
} from './schemas.js';

/** Index reads of one listing page: each passes over entries whose session is gone. */
const LIST_ROUNDS = 8;
/**
 * Pages of 200 sessions `waiting` reads at most: it looks among the 1,000 newest sessions (the
 * index keeps no state), so `orq status` stays one bounded read however many sessions are kept.
 */
const WAITING_PAGES = 5;

export class SessionReader {
  constructor(private readonly context: ClientContext) {}

  get(sessionId: string): Promise<SessionView> {
    return this.context.guard(async () => {
      parseOrThrow(SessionId, sessionId, 'session id');
      const { snapshot, tasks } = await this.loadWithTasks(sessionId);
      const usage = await this.context.usageStore.read(sessionId);
      const { progress, queued } = await readRunningJobs(this.context.queues, sessionId, tasks);
      const { counters } = snapshot;
      const { session } = snapshot;
      return { session, tasks, counters, usage, progress, queued, ...builtinUse(session.config) };
    });
  }

  async list(options: ListRequest = {}): Promise<Session[]> {
    return (await this.listPage(options)).sessions;
  }

  listPage(options: ListRequest = {}): Promise<SessionPage> {
    return this.context.guard(async () => {
      const { store } = this.context;
      const request = parseOrThrow(ListRequest, options, 'list options');
      const limit = request.limit ?? 50;
      const { tenant } = request;
      const found: { session: Session; entry: ListCursor }[] = [];
      let after = request.after !== undefined ? parseCursor(request.after) : undefined;
      let offset = request.offset ?? 0;
      // One more than the page, to tell whether a next page exists. An entry whose session is
      // gone (deleted since, or mid-submit) is passed over and the next read: boundedly.
      for (let round = 0; round < LIST_ROUNDS; round += 1) {
        const want = limit + 1 - found.length;
        const entries = await store.index.page({
          limit: want,
          offset,
          ...(after ? { after } : {}),
          ...(tenant !== undefined ? { tenant } : {}),
        });
        offset = 0;
        const snapshots = await Promise.all(entries.map((entry) => store.loadSession(entry.id)));
        for (const [i, snapshot] of snapshots.entries()) {
          if (!snapshot || (tenant !== undefined && snapshot.session.tenant !== tenant)) continue;
          found.push({ session: snapshot.session, entry: entries[i]! });
        }
        if (entries.length < want) return { sessions: found.map((f) => f.session) };
        if (found.length > limit) {
          const page = found.slice(0, limit);
          return { sessions: page.map((f) => f.session), next: formatCursor(page.at(-1)!.entry) };
        }
        after = entries.at(-1);
      }
      // Many entries in a row named no session: a short page, and the cursor to read on from.
      return {
        sessions: found.map((f) => f.session),
        ...(after ? { next: formatCursor(after) } : {}),
      };
    });
  }

  history(sessionId: string, options?: HistoryRequest): Promise<StoredHistoryEntry[]> {
    return this.context.guard(async () => {
      parseOrThrow(SessionId, sessionId, 'session id');
      const parsed = parseOrThrow(HistoryRequest, options ?? {}, 'history options');
      await this.context.store.requireSession(sessionId);
      return this.context.store.history(sessionId, parsed);
    });
  }

  historyJsonl(sessionId: string): Promise<string> {
    return this.context.guard(async () => {
      parseOrThrow(SessionId, sessionId, 'session id');
      await this.context.store.requireSession(sessionId);
      const entries = await this.context.store.history(sessionId);
      return entries.map((e) => JSON.stringify(e.entry)).join('\n') + (entries.length ? '\n' : '');
    });
  }

  result(sessionId: string, options?: ResultRequest): Promise<SessionResult> {
    return this.context.guard(async () => {
      parseOrThrow(SessionId, sessionId, 'session id');
      const { partial } = parseOrThrow(ResultRequest, options ?? {}, 'result options');
      const { snapshot, tasks } = await this.loadWithTasks(sessionId);
      const { session } = snapshot;
      const result = deriveSessionResult(session, tasks);
      if (!partial && !resultIsFinal(session.state)) throw resultNotFinal(result);
      return result;
    });
  }

  waiting(options: { tenant?: string; limit?: number } = {}): Promise<Session[]> {
    return this.context.guard(async () => {
      const limit = options.limit ?? 100;
      const found: Session[] = [];
      let after: string | undefined;
      // The index has no state: page through it, keeping the sessions that wait.
      for (let page = 0; page < WAITING_PAGES && found.length < limit; page += 1) {
        const { sessions, next } = await this.listPage({
          limit: 200,
          ...(after ? { after } : {}),
          ...(options.tenant ? { tenant: options.tenant } : {}),
        });
        found.push(
          ...sessions.filter(
            (x) =>
              x.state === 'AWAITING_APPROVAL' ||
              (['RUNNING', 'BLOCKED'].includes(x.state) &&
                ((x.questions ?? []).length > 0 || (x.stepWaits ?? []).length > 0)),
          ),
        );
        if (!next) break;
        after = next;
      }
      return found.slice(0, limit);
    });
  }

  consumers(): Promise<Partial<Record<Role, number>>> {
    return this.context.guard(async () => {
      const counts = await Promise.all(
        Role.options.map(async (role) => {
          const count = await this.context.queues
            .get(ROLE_QUEUE[role])
            .getWorkersCount()
            .catch((error: unknown) => {
              // A server that refuses CLIENT LIST cannot tell; a lost one is REDIS_UNAVAILABLE.
              if (isTransportError(error)) throw error;
              return undefined;
            });
          return [role, count] as const;
        }),
      );
      return Object.fromEntries(counts.filter(([, count]) => count !== undefined));
    });
  }

  quotas(): Promise<QuotaView[]> {
    return this.context.guard(() => this.context.quotaStore.report());
  }

  tenants(): Promise<TenantLoad[]> {
    const { store, queues } = this.context;
    return this.context.guard(() => readTenantLoad(store.redis, store.prefix, queues.fair));
  }

  /** The session and its tasks in plan order, the tasks read through the task view cache. */
  private async loadWithTasks(sessionId: string) {
    const { store, taskViews } = this.context;
    const snapshot = await store.requireSession(sessionId);
    const tasks = await store.loadTasksInOrder(
      sessionId,
      snapshot.session.taskIds,
      taskViews.of(sessionId),
    );
    taskViews.trim();
    return { snapshot, tasks };
  }
}
