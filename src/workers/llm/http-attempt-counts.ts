import type { ChatProvider } from './chat.js';
import {
  onHttpAttempts,
  type HttpAttempt,
  type HttpAttemptEvents,
  type HttpAttemptTarget,
} from './http-attempts.js';

/**
 * `provider` with the HTTP requests of each call reported to `events`, labelled with the
 * role's provider kind and model: each call is a scope of its own, so an SDK's (or a quota
 * gate's) second try of the same call counts as a retry.
 */
export function countHttpAttempts(
  provider: ChatProvider,
  target: HttpAttemptTarget,
  events: HttpAttemptEvents,
): ChatProvider {
  const onAttempt = (attempt: HttpAttempt) => events.httpAttempt(target, attempt);
  return {
    label: provider.label,
    complete: (request) => onHttpAttempts(onAttempt, () => provider.complete(request)),
    ...(provider.ready ? { ready: provider.ready.bind(provider) } : {}),
  };
}
