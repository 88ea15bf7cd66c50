import type { OrqClient } from '../../src/producers/client.js';
import type { SessionState } from '../../src/shared/domain/session.js';

/**
 * Moves a session to `state` with one write, as the coordinator would, its state change in the
 * history: for tests with no roles that need a session stopped (BLOCKED, BUDGET_EXHAUSTED).
 */
export async function moveSession(
  client: OrqClient,
  sessionId: string,
  state: SessionState,
): Promise<void> {
  const snapshot = await client.store.requireSession(sessionId);
  await client.store.apply(sessionId, {
    eventId: `test-move|${sessionId}|${snapshot.version}`,
    session: { record: { ...snapshot.session, state }, expectedVersion: snapshot.version },
    history: [{ type: 'state_change', entity: 'session', from: snapshot.session.state, to: state }],
  });
}
