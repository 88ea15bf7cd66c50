import { AsyncLocalStorage } from 'node:async_hooks';
import type { ModelRole } from '../../shared/config/roles.js';

/**
 * The HTTP requests behind orq's model calls. A call (one `ChatProvider.complete`) is logical:
 * the official SDKs retry 429s, 5xx and timeouts inside it, so one call may be several HTTP
 * requests. `attemptFetch` is the fetch the SDKs are given (chat.ts): it sees every attempt,
 * retries included, and tells the scopes the call runs in (`onHttpAttempts`) of each one.
 * `countHttpAttempts` (http-attempt-counts.ts) opens such a scope per call of a provider.
 */

/** One HTTP request an SDK sent for a model call. */
export interface HttpAttempt {
  /**
   * The status it was answered with; `connection` when no answer came (refused, reset, DNS),
   * `aborted` when the call's deadline or a cancel stopped it first.
   */
  status: number | 'connection' | 'aborted';
  /** From sending it until the answer's headers (or the failure). */
  seconds: number;
  /** Sent again after an earlier attempt of the same call failed (an SDK or quota retry). */
  retry: boolean;
}

/** Whether an attempt failed: no answer, or an answer other than 2xx. */
export const isFailedAttempt = (attempt: Pick<HttpAttempt, 'status'>): boolean =>
  typeof attempt.status !== 'number' || attempt.status < 200 || attempt.status >= 300;

/** Which model an attempt was for: the labels of the pod's metrics. */
export interface HttpAttemptTarget {
  /** The provider kind (openai, anthropic). */
  provider: string;
  model: string;
  role: ModelRole;
}

/** What a pod's metrics count of the HTTP requests of its model calls. */
export interface HttpAttemptEvents {
  httpAttempt(target: HttpAttemptTarget, attempt: HttpAttempt): void;
}

interface Scope {
  readonly onAttempt: (attempt: HttpAttempt) => void;
  readonly parent: Scope | undefined;
  /** Attempts sent in this scope so far: all but the first of a call are retries. */
  sent: number;
}

const scopes = new AsyncLocalStorage<Scope>();

/**
 * Runs `work`, telling `onAttempt` of every HTTP request its model calls send. Scopes nest:
 * each one hears every attempt under it; the innermost decides which attempts are retries.
 */
export function onHttpAttempts<T>(
  onAttempt: (attempt: HttpAttempt) => void,
  work: () => Promise<T>,
): Promise<T> {
  return scopes.run({ onAttempt, parent: scopes.getStore(), sent: 0 }, work);
}

function report(scope: Scope, status: HttpAttempt['status'], started: number, retry: boolean) {
  const attempt = { status, seconds: (performance.now() - started) / 1000, retry };
  for (let at: Scope | undefined = scope; at; at = at.parent) {
    try {
      at.onAttempt(attempt);
    } catch {
      // A count must never fail the call it counts.
    }
  }
}

/** The global fetch, timing each request for the scopes it runs in. */
export const attemptFetch: typeof fetch = async (input, init) => {
  const scope = scopes.getStore();
  if (!scope) return fetch(input, init);
  const retry = scope.sent > 0;
  scope.sent += 1;
  const started = performance.now();
  let response: Response;
  try {
    response = await fetch(input, init);
  } catch (error) {
    report(scope, init?.signal?.aborted ? 'aborted' : 'connection', started, retry);
    throw error;
  }
  report(scope, response.status, started, retry);
  return response;
};
