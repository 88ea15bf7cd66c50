/**
 * The typed producer API other systems use to submit and follow work. A client is made of
 * three parts over one shared context (context.ts): its requests (requests.ts), its reading
 * (reading.ts) and its watching (watching.ts).
 */
import type { Session } from '../../shared/domain/session.js';
import type { SessionResult } from '../../shared/domain/result.js';
import type { WaitAnswerInput } from '../../shared/domain/human-wait.js';
import type { QuotaView } from '../../shared/domain/quota.js';
import type { Role } from '../../shared/queues.js';
import type { AddressSetting } from '../../shared/redis.js';
import type { SessionStore } from '../../shared/store/session-store.js';
import type { StoredHistoryEntry } from '../../shared/store/session-records.js';
import type { DeletedSession, PruneReport } from '../../shared/store/session-retention.js';
import type { TenantLoad } from '../../shared/store/tenant-load.js';
import { ClientContext, type CreateClientOptions } from './context.js';
import { SessionReader } from './reading.js';
import { SessionRequests } from './requests.js';
import { SessionWatcher } from './watching.js';
import type {
  AnswerOptions,
  AnswerOutcome,
  HistoryRequest,
  ListRequest,
  PlanBreakdownInput,
  PruneRequest,
  ResultRequest,
  ResumeRequest,
  SessionPage,
  SessionView,
  SubmitOptions,
  SubmitOutcome,
  SubmitRequest,
  WaitOptions,
  WatchOptions,
} from './schemas.js';

export type { CreateClientOptions } from './context.js';

export interface OrqClient {
  readonly store: SessionStore;

  // Requests: what it asks of orq, checked, then enqueued through the outbox (requests.ts)
  submit(request: SubmitRequest, options?: SubmitOptions): Promise<Session>;
  /**
   * As submit, and says whether this call created the session: false when its idempotency key
   * named a session already, even one a concurrent submit with that key was creating.
   */
  submitWithOutcome(request: SubmitRequest, options?: SubmitOptions): Promise<SubmitOutcome>;
  /**
   * Asks the coordinator to resume blocked tasks and waits up to `waitMs` (default 5 s; 0: don't
   * wait) until it has applied the request, so a `wait` right after sees the resumed session.
   * Returns the request id.
   */
  resume(
    sessionId: string,
    request?: ResumeRequest,
    options?: {
      waitMs?: number;
      /**
       * Refuse a budget above the client's own config (FORBIDDEN): for callers who are not the
       * operator (the HTTP API), who may only lower a budget (issue 41).
       */
      budgetWithinConfig?: boolean;
    },
  ): Promise<string>;
  cancel(sessionId: string, reason?: string): Promise<void>;
  /**
   * Answers the plan approval a session AWAITING_APPROVAL waits on (issue 48): approve it, run an
   * edited plan instead (checked as a replan is: structure and required terms), or reject it
   * with feedback for the Planner. Waits up to `waitMs` (default 5 s) for the coordinator to
   * apply it. WAIT_ENDED when the wait is not open (answered, timed out, or `waitId` names an
   * older one); the same when a concurrent answer to it was applied first. ANSWER_NOT_APPLIED
   * when the coordinator failed to apply it on every try: the wait is still open.
   */
  answer(
    sessionId: string,
    answer: WaitAnswerInput,
    options?: AnswerOptions,
  ): Promise<AnswerOutcome>;
  /**
   * Answers a question a blocked task asks (issue 48): the task runs again with the question and
   * `text` in its context. Names the task (`taskId`) or the wait (`waitId`) when several ask.
   */
  answerQuestion(sessionId: string, text: string, options?: AnswerOptions): Promise<AnswerOutcome>;
  approve(
    sessionId: string,
    options?: AnswerOptions & { comment?: string },
  ): Promise<AnswerOutcome>;
  reject(sessionId: string, feedback: string, options?: AnswerOptions): Promise<AnswerOutcome>;
  editPlan(
    sessionId: string,
    plan: PlanBreakdownInput,
    options?: AnswerOptions & { allowTermLoss?: boolean; comment?: string },
  ): Promise<AnswerOutcome>;
  /**
   * Deletes a finished session and every key kept of it (record, tasks, history, usage, leases,
   * agent steps, outbox), then its index entry and its idempotency key. A submit with that key,
   * even one racing the delete, starts a new session under a new id.
   * Refuses a session still planning, running or blocked: cancel it first.
   */
  delete(sessionId: string): Promise<DeletedSession>;
  /** Deletes the finished sessions idle for longer than `olderThanSeconds`. */
  prune(request: PruneRequest): Promise<PruneReport>;

  // Reading: what it reads without changing anything (reading.ts)
  get(sessionId: string): Promise<SessionView>;
  list(options?: ListRequest): Promise<Session[]>;
  /** As list, with the cursor of the next page (`after`) when there are more sessions. */
  listPage(options?: ListRequest): Promise<SessionPage>;
  history(sessionId: string, options?: HistoryRequest): Promise<StoredHistoryEntry[]>;
  historyJsonl(sessionId: string): Promise<string>;
  /**
   * What the session produced (rules/session-result.ts): the outputs of its final tasks, or of
   * the tasks its result.tasks setting names, with notes on anything missing. A session that
   * stopped short (BLOCKED, FAILED, CANCELLED, BUDGET_EXHAUSTED) gives what it did; one still
   * PLANNING or RUNNING is refused (INVALID_STATE) unless `partial` is set.
   */
  result(sessionId: string, options?: ResultRequest): Promise<SessionResult>;
  /**
   * Sessions that wait for a person now (AWAITING_APPROVAL, or with a question or step open) among the
   * 1,000 newest, newest first, at most `limit`.
   */
  waiting(options?: { tenant?: string; limit?: number }): Promise<Session[]>;
  /**
   * How many processes consume each role's queue now, as BullMQ counts its workers (CLIENT
   * LIST); empty when the server does not answer that (some managed Redis refuse CLIENT LIST).
   */
  consumers(): Promise<Partial<Record<Role, number>>>;
  /**
   * Every provider limit (llm.<role>.rateLimit) the pods have used, with what is left of it
   * now, the calls in flight, the pause after a 429 and what it has counted (issue 33).
   */
  quotas(): Promise<QuotaView[]>;
  /** Per tenant: its sessions with work, tasks in flight and tasks waiting for a slot. */
  tenants(): Promise<TenantLoad[]>;

  // Watching: following a session as it moves (watching.ts)
  /**
   * Follows the session's history until it settles (WatchOptions.until). A resume or cancel the
   * coordinator has not applied yet keeps the watch going, so one started right after `resume`
   * or `cancel` does not end at the state from before it.
   */
  watch(sessionId: string, options?: WatchOptions): AsyncGenerator<StoredHistoryEntry>;
  /**
   * Follows the session until it settles (`until`, default 'settled': finished or BLOCKED) and
   * returns its view. Throws TIMEOUT when `timeoutMs` passes first, saying which roles run.
   */
  wait(sessionId: string, options?: WaitOptions): Promise<SessionView>;
  /**
   * Whether a resume of the session was enqueued and the coordinator has not applied it yet
   * (its job still waits or runs), in a state a resume moves on from (BLOCKED, BUDGET_EXHAUSTED):
   * the session is about to move although its state says it stopped.
   */
  resumePending(sessionId: string): Promise<boolean>;
  /**
   * As resumePending, for a resume or a cancel: whether the session is about to move (or end)
   * although its state says it stopped. What a watch waits for before it ends.
   */
  requestPending(sessionId: string): Promise<boolean>;

  close(): Promise<void>;
}

/** The typed producer API other systems use to submit and follow work. */
export function createClient(options: CreateClientOptions): Promise<OrqClient> {
  return openClient(options, 'connection');
}

/**
 * createClient for orq's own commands: `addressSetting` says where their user set the Redis
 * address (REDIS_URL for the CLI), so a connection error's hint names that, not the option.
 */
export async function openClient(
  options: CreateClientOptions,
  addressSetting: AddressSetting,
): Promise<OrqClient> {
  return assembleClient(await ClientContext.open(options, addressSetting));
}

/**
 * The client as one object over its three parts. Its methods are plain functions, as they
 * always were: a caller may pass `client.get` along without binding it.
 */
function assembleClient(context: ClientContext): OrqClient {
  const reader = new SessionReader(context);
  const watcher = new SessionWatcher(context, reader);
  const requests = new SessionRequests(context, watcher);
  return {
    store: context.store,

    submit: (request, options) => requests.submit(request, options),
    submitWithOutcome: (request, options) => requests.submitWithOutcome(request, options),
    resume: (sessionId, request, options) => requests.resume(sessionId, request, options),
    cancel: (sessionId, reason) => requests.cancel(sessionId, reason),
    answer: (sessionId, answer, options) => requests.answer(sessionId, answer, options),
    answerQuestion: (sessionId, text, options) => requests.answerQuestion(sessionId, text, options),
    approve: (sessionId, options) => requests.approve(sessionId, options),
    reject: (sessionId, feedback, options) => requests.reject(sessionId, feedback, options),
    editPlan: (sessionId, plan, options) => requests.editPlan(sessionId, plan, options),
    delete: (sessionId) => requests.delete(sessionId),
    prune: (request) => requests.prune(request),

    get: (sessionId) => reader.get(sessionId),
    list: (options) => reader.list(options),
    listPage: (options) => reader.listPage(options),
    history: (sessionId, options) => reader.history(sessionId, options),
    historyJsonl: (sessionId) => reader.historyJsonl(sessionId),
    result: (sessionId, options) => reader.result(sessionId, options),
    waiting: (options) => reader.waiting(options),
    consumers: () => reader.consumers(),
    quotas: () => reader.quotas(),
    tenants: () => reader.tenants(),

    watch: (sessionId, options) => watcher.watch(sessionId, options),
    wait: (sessionId, options) => watcher.wait(sessionId, options),
    resumePending: (sessionId) => watcher.resumePending(sessionId),
    requestPending: (sessionId) => watcher.requestPending(sessionId),

    close: () => context.close(),
  };
}
