import { SessionEnded } from '../shared/domain/session.js';
import type { Logger } from '../shared/logger.js';
import { blockingTwin, type RedisConnection } from '../shared/redis.js';
import { sessionEndedChannel } from '../shared/store/keys.js';

/**
 * Follows the announcements of sessions that ended (SessionStore.apply publishes them) on a
 * connection of its own, as a subscribed connection can send nothing else; ioredis subscribes
 * again by itself after a reconnect. Resolves once subscribed (or, if that fails, once the
 * failure is logged), to the function that stops.
 */
export async function followSessionEnds(
  redis: RedisConnection,
  prefix: string,
  onEnded: (ended: SessionEnded) => void,
  logger: Logger,
): Promise<() => void> {
  const channel = sessionEndedChannel(prefix);
  const subscriber = blockingTwin(redis);
  // The roles' own connection reports Redis being away; this one only waits for it.
  subscriber.on('error', () => undefined);
  subscriber.on('message', (from: string, raw: string) => {
    if (from !== channel) return;
    const ended = SessionEnded.safeParse(parseJson(raw));
    if (ended.success) onEnded(ended.data);
    else logger.warn({ channel, message: raw.slice(0, 200) }, 'ignoring a malformed message');
  });
  try {
    await subscriber.subscribe(channel);
  } catch (error) {
    // Not fatal: the pods' polling of session states still stops the calls, only later.
    logger.warn({ channel, err: (error as Error).message }, 'not following session ends');
    subscriber.disconnect();
    return () => undefined;
  }
  return () => subscriber.disconnect();
}

function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return undefined;
  }
}
