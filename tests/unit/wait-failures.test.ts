import { describe, expect, it } from 'vitest';
import type { HistoryEntryDraft } from '../../src/shared/domain/history.js';
import { Session } from '../../src/shared/domain/session.js';
import { waitEventFailed } from '../../src/workers/coordinator/wait-failures.js';

// An answer the coordinator failed to apply on every try (issue 48): the history says whether
// the wait it answered is still open, so a person knows to answer again. Every kind of wait.

const openedAt = '2026-11-29T00:00:00.000Z';
const base = Session.parse({
  id: 's1',
  instruction: 'push the image',
  state: 'RUNNING',
  createdAt: openedAt,
  updatedAt: openedAt,
  requiredTerms: { terms: [], source: 'user-input' },
  config: {},
  planning: {},
});
const error: HistoryEntryDraft = { type: 'error', message: 'boom' } as HistoryEntryDraft;

function stillOpen(session: Session, waitId: string): unknown {
  const event = {
    sessionId: session.id,
    role: 'coordinator',
    attempt: 3,
    jobId: `answer|${session.id}|${waitId}|r1`,
    error: 'boom',
    waitId,
  } as Parameters<typeof waitEventFailed>[1];
  const transition = waitEventFailed(session, event, 'e1', error);
  if (!('changeset' in transition)) throw new Error(`ignored: ${transition.ignore}`);
  const decision = transition.changeset.history?.find((h) => h.type === 'decision');
  return decision && 'inputs' in decision ? decision.inputs?.stillOpen : undefined;
}

describe('an answer that failed on every try', () => {
  it('says a step approval it answered is still open', () => {
    const session: Session = {
      ...base,
      stepWaits: [
        {
          id: 'step-t1-1-4',
          kind: 'step-approval',
          openedAt,
          taskId: 't1',
          attempt: 1,
          step: 4,
          tool: 'run_command',
          input: { command: ['git', 'push'] },
          rule: 'tool run_command',
        },
      ],
    };
    expect(stillOpen(session, 'step-t1-1-4')).toBe(true);
    expect(stillOpen(session, 'step-t1-1-5')).toBe(false);
  });

  it('says a question it answered is still open', () => {
    const session: Session = {
      ...base,
      state: 'BLOCKED',
      questions: [
        {
          id: 'question-t1-1',
          kind: 'question',
          openedAt,
          taskId: 't1',
          attempt: 1,
          question: 'which registry?',
          reason: 'none given',
        },
      ],
    };
    expect(stillOpen(session, 'question-t1-1')).toBe(true);
  });
});
