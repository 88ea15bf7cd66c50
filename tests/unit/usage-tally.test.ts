import { describe, expect, it } from 'vitest';
import { UsageTally } from '../../src/workers/llm/usage-tally.js';
import { UnsettledUsage } from '../../src/shared/queues.js';

const call = (taskId: string): UnsettledUsage => ({
  role: 'worker',
  taskId,
  inputTokens: 10,
  outputTokens: 2,
  usdMicros: 0,
});

describe('UsageTally', () => {
  it('adds no field to a job or event while nothing is pending', () => {
    expect(new UsageTally().field()).toEqual({});
  });

  it('gives the pending calls as the unsettledUsage field, a copy that passedOn does not empty', () => {
    const tally = new UsageTally();
    tally.record(call('a'));
    tally.record(call('b'));
    const field = tally.field();
    expect(field).toEqual({ unsettledUsage: [call('a'), call('b')] });
    tally.passedOn();
    expect(tally.field()).toEqual({});
    expect(field.unsettledUsage).toHaveLength(2);
  });

  it('writes a field the job and event schemas accept', () => {
    const tally = new UsageTally();
    tally.record({ ...call('a'), role: 'judge', unpriced: true });
    expect(UnsettledUsage.array().parse(tally.field().unsettledUsage)).toHaveLength(1);
    expect(() => UnsettledUsage.parse({ ...call('a'), role: 'coordinator' })).toThrow();
  });
});
