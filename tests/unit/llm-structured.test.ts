import { describe, expect, it } from 'vitest';
import {
  PlanBreakdown,
  QualityJudgement,
  QualityJudgementAnswer,
} from '../../src/shared/domain/plan.js';
import { TaskJudgementAnswer } from '../../src/shared/domain/task.js';
import { OrqError } from '../../src/shared/errors.js';
import {
  ToolCallReply,
  usageOfFailure,
  type ChatProvider,
  type ChatRequest,
} from '../../src/workers/llm/chat.js';
import {
  anthropicJsonSchema,
  callStructured,
  checkReplyText,
  dropNulls,
  extractJson,
  ignoredFormat,
  replyJsonSchema,
} from '../../src/workers/llm/structured.js';

const judgement = { score: 82, isAcceptable: true, issues: [], suggestions: ['add tests'] };

describe('extractJson', () => {
  it('parses a reply that is only JSON', () => {
    expect(extractJson(JSON.stringify(judgement))).toEqual({ found: true, value: judgement });
  });

  it('parses JSON in a ```json code fence', () => {
    const reply = `Here you go:\n\`\`\`json\n${JSON.stringify(judgement, null, 2)}\n\`\`\`\nDone.`;
    expect(extractJson(reply)).toEqual({ found: true, value: judgement });
  });

  it('parses JSON in a fence without a language tag', () => {
    expect(extractJson('```\n{"a": 1}\n```')).toEqual({ found: true, value: { a: 1 } });
  });

  it('parses JSON surrounded by prose, with braces inside strings', () => {
    const value = { reason: 'use {curly} and [square] brackets', ok: true };
    const reply = `I think {this} is right. Answer: ${JSON.stringify(value)} — hope that helps!`;
    expect(extractJson(reply)).toEqual({ found: true, value });
  });

  it('skips a reasoning block before the answer', () => {
    const reply = `<think>maybe {"score": 1}? no.</think>\n{"score": 2}`;
    expect(extractJson(reply)).toEqual({ found: true, value: { score: 2 } });
  });

  it('reports no JSON when there is none', () => {
    expect(extractJson('I cannot help with that.')).toEqual({ found: false });
    expect(extractJson('{"unterminated": ')).toEqual({ found: false });
  });
});

describe('checkReplyText', () => {
  it('drops nulls that strict-mode models send for absent optional fields', () => {
    const reply = JSON.stringify({ score: null, isAcceptable: false, issues: ['x'] });
    expect(checkReplyText(QualityJudgement, reply)).toEqual({
      ok: true,
      value: { isAcceptable: false, issues: ['x'], suggestions: [] },
    });
    expect(dropNulls([{ a: null, b: [{ c: null, d: 1 }] }])).toEqual([{ b: [{ d: 1 }] }]);
  });

  it('names the fields that fail the schema', () => {
    const reply = JSON.stringify({ tasks: [{ id: 't1', title: 'x' }] });
    const check = checkReplyText(PlanBreakdown, reply);
    expect(check.ok).toBe(false);
    if (!check.ok) expect(check.issues.map((i) => i.path)).toEqual(['tasks.0.acceptance']);
  });
});

describe('replyJsonSchema', () => {
  it('gives the input shape of the zod schema, without $schema', () => {
    const schema = replyJsonSchema(TaskJudgementAnswer, { strict: false });
    expect(schema.$schema).toBeUndefined();
    expect(schema.required).toEqual(['success', 'shouldContinue', 'shouldReplan']);
  });

  it("shows a judge only what it answers: a required score, none of orq's own fields", () => {
    const schema = replyJsonSchema(QualityJudgementAnswer, { strict: false }) as {
      required: string[];
      properties: Record<string, unknown>;
    };
    expect(Object.keys(schema.properties)).toEqual([
      'score',
      'isAcceptable',
      'issues',
      'suggestions',
    ]);
    expect(schema.required).toEqual(['score', 'isAcceptable']);
  });

  it('rewrites for strict mode: all properties required, optional ones nullable, closed objects', () => {
    const schema = replyJsonSchema(PlanBreakdown, { strict: true }) as {
      required: string[];
      additionalProperties: boolean;
      properties: Record<string, { type?: unknown; items?: Record<string, unknown> }>;
    };
    expect(schema.required).toEqual(['summary', 'tasks']);
    expect(schema.additionalProperties).toBe(false);
    expect(schema.properties.summary?.type).toEqual(['string', 'null']);
    const task = schema.properties.tasks?.items as {
      required: string[];
      additionalProperties: boolean;
      properties: Record<string, Record<string, unknown>>;
    };
    expect(task.required).toEqual([
      'id',
      'title',
      'acceptance',
      'context',
      'scopePaths',
      'dependencies',
      'executor',
    ]);
    expect(task.additionalProperties).toBe(false);
    expect(task.properties.id).toEqual({ type: 'string', pattern: '^[A-Za-z0-9_.-]+$' });
    expect(JSON.stringify(schema)).not.toMatch(/"default"|"minLength"|"maxLength"/);
  });
});

describe('anthropicJsonSchema', () => {
  /** Every schema node under `node`, itself included. */
  function nodes(node: unknown): Record<string, unknown>[] {
    if (typeof node !== 'object' || node === null) return [];
    const record = node as Record<string, unknown>;
    const children = [
      ...Object.values((record.properties ?? {}) as Record<string, unknown>),
      ...Object.values((record.$defs ?? {}) as Record<string, unknown>),
      ...(Array.isArray(record.anyOf) ? record.anyOf : []),
      ...(record.items ? [record.items] : []),
    ];
    return [record, ...children.flatMap(nodes)];
  }

  it('closes every object and keeps only what JSON outputs accept, for every reply schema', () => {
    const allowed = new Set([
      'type',
      'properties',
      'required',
      'items',
      'enum',
      'const',
      'anyOf',
      'description',
      'title',
      '$ref',
      '$defs',
      'additionalProperties',
      'format',
      'minItems',
    ]);
    for (const [name, schema] of Object.entries({
      PlanBreakdown,
      QualityJudgementAnswer,
      TaskJudgementAnswer,
    })) {
      const json = anthropicJsonSchema(schema, name);
      expect(json.title).toBe(name);
      for (const node of nodes(json)) {
        for (const key of Object.keys(node)) expect(allowed, `${name}: ${key}`).toContain(key);
        if (node.type === 'object') expect(node.additionalProperties, name).toBe(false);
        if ('minItems' in node) expect([0, 1]).toContain(node.minItems);
      }
    }
  });

  it('says the bounds it cannot send in the field description, and requires what orq needs', () => {
    const json = anthropicJsonSchema(QualityJudgementAnswer, 'QualityJudgement');
    const score = (json.properties as Record<string, Record<string, unknown>>).score;
    expect(score).not.toHaveProperty('minimum');
    expect(score?.description).toContain('at least 0; at most 100');
    expect(json.required).toEqual(expect.arrayContaining(['score', 'isAcceptable']));
  });
});

describe('ignoredFormat', () => {
  const answer = JSON.stringify(judgement);
  it.each([
    ['prose', 'The plan is good, I would give it 80.'],
    ['a fenced answer', `\`\`\`json\n${answer}\n\`\`\``],
    ['prose around the answer', `Here it is: ${answer}`],
    ["the model's own shape", JSON.stringify({ verdict: 'ok', rating: 80 })],
    ['a missing required field', JSON.stringify({ isAcceptable: true })],
  ])('counts %s as a server that ignored the format', (_what, reply) => {
    expect(ignoredFormat(QualityJudgementAnswer, reply)).toBe(true);
  });

  it.each([
    ['a valid answer', answer],
    ['a score out of range', JSON.stringify({ ...judgement, score: 120 })],
    ['a value of the wrong type', JSON.stringify({ ...judgement, score: 'high' })],
  ])('does not count %s: an enforcing server sends that too', (_what, reply) => {
    expect(ignoredFormat(QualityJudgementAnswer, reply)).toBe(false);
  });
});

/** A provider answering from a list, recording the requests (no network: pure repair logic). */
function scriptedProvider(replies: string[]): ChatProvider & { requests: ChatRequest[] } {
  const requests: ChatRequest[] = [];
  return {
    label: 'scripted:test',
    requests,
    complete(request) {
      requests.push(request);
      const raw = replies[Math.min(requests.length - 1, replies.length - 1)] ?? '';
      return Promise.resolve({ raw, usage: { inputTokens: 10, outputTokens: 3 } });
    },
  };
}

const request = {
  role: 'judge' as const,
  system: 'judge plans',
  user: 'the plan',
  schema: QualityJudgement,
  schemaName: 'QualityJudgement',
  temperature: 0,
  timeoutMs: 1000,
};

describe('callStructured', () => {
  it('returns the first valid reply without a repair turn', async () => {
    const provider = scriptedProvider([JSON.stringify(judgement)]);
    const reply = await callStructured(provider, request, { maxRepairAttempts: 1 });
    expect(reply).toMatchObject({ value: judgement, repairs: 0 });
    expect(provider.requests).toHaveLength(1);
  });

  it('sends one repair turn with the reply and the validation error, then succeeds', async () => {
    const bad = JSON.stringify({ score: 'high' });
    const provider = scriptedProvider([bad, JSON.stringify(judgement)]);
    const reply = await callStructured(provider, request, { maxRepairAttempts: 1 });
    expect(reply.value).toEqual(judgement);
    expect(reply.repairs).toBe(1);
    expect(reply.usage).toEqual({ inputTokens: 20, outputTokens: 6 });
    const repair = provider.requests[1]?.followUp;
    expect(repair?.reply).toBe(bad);
    expect(repair?.correction).toContain('QualityJudgement');
    expect(repair?.correction).toContain('score');
    expect(repair?.correction).toContain('isAcceptable');
    // The schema itself, for a model whose server never showed it one.
    expect(repair?.correction).toContain('"properties": {');
  });

  it('in native mode, tells once that the server ignored the format, and says so in the reply', async () => {
    const provider = scriptedProvider(['Looks fine.', 'Still fine.', JSON.stringify(judgement)]);
    const told: unknown[] = [];
    const reply = await callStructured(provider, request, {
      maxRepairAttempts: 2,
      structuredOutput: 'native',
      onFormatIgnored: (detail) => told.push(detail),
    });
    expect(reply).toMatchObject({ value: judgement, repairs: 2, formatIgnored: true });
    expect(told).toHaveLength(1);
  });

  it("outside native mode the format is the prompt's: nothing to fall back from", async () => {
    const provider = scriptedProvider(['Looks fine.']);
    const told: unknown[] = [];
    const error = await callStructured(provider, request, {
      maxRepairAttempts: 0,
      structuredOutput: 'prompt',
      onFormatIgnored: (detail) => told.push(detail),
    }).catch((e: unknown) => e);
    expect(told).toEqual([]);
    expect((error as OrqError).hint).toContain('follows JSON schemas better');
  });

  it('fails with LLM_OUTPUT_INVALID naming the schema and fields after the repairs run out', async () => {
    const provider = scriptedProvider(['no json here', '{"isAcceptable": "yes"}']);
    const error = await callStructured(provider, request, { maxRepairAttempts: 1 }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OrqError);
    const orq = error as OrqError;
    expect(orq.code).toBe('LLM_OUTPUT_INVALID');
    expect(orq.message).toContain('QualityJudgement');
    expect(orq.message).toContain('isAcceptable');
    expect(orq.details).toMatchObject({
      schemaName: 'QualityJudgement',
      repairs: 1,
      usage: { inputTokens: 20, outputTokens: 6 },
    });
    expect(provider.requests).toHaveLength(2);
  });

  it('a repair turn that fails keeps the usage of the turns before it on the error', async () => {
    let calls = 0;
    const provider: ChatProvider = {
      label: 'scripted:test',
      complete() {
        calls += 1;
        if (calls === 1)
          return Promise.resolve({ raw: 'no json', usage: { inputTokens: 10, outputTokens: 3 } });
        return Promise.reject(
          new OrqError('LLM_CALL_FAILED', 'cut off', {
            details: {
              kind: 'reply',
              truncated: true,
              usage: { inputTokens: 12, outputTokens: 40 },
            },
          }),
        );
      },
    };
    const error = await callStructured(provider, request, { maxRepairAttempts: 1 }).catch(
      (e: unknown) => e,
    );
    expect((error as OrqError).message).toBe('cut off');
    expect(usageOfFailure(error)).toEqual({ inputTokens: 22, outputTokens: 43 });
  });

  it('says the model made no tool call when tools were offered and it answered in prose', async () => {
    const withTools = {
      ...request,
      schema: ToolCallReply,
      schemaName: 'AgentToolCall',
      tools: [{ name: 'read_file', description: 'reads', inputSchema: { type: 'object' } }],
    };
    const prose = scriptedProvider(['I would read the file first.']);
    await expect(callStructured(prose, withTools, { maxRepairAttempts: 0 })).rejects.toThrow(
      /made no tool call.*toolCalling "structured"/,
    );
    // A call whose input is wrong is not "no call": the usual hint.
    const badCall = scriptedProvider([JSON.stringify({ tool: 'read_file', input: 'x' })]);
    const error = await callStructured(badCall, withTools, { maxRepairAttempts: 0 }).catch(
      (e: unknown) => e,
    );
    expect((error as OrqError).hint).toContain('follows JSON schemas better');
  });

  it('makes no repair turn when maxRepairAttempts is 0', async () => {
    const provider = scriptedProvider(['nope']);
    await expect(callStructured(provider, request, { maxRepairAttempts: 0 })).rejects.toThrow(
      /after 0 repair attempts.*contains no JSON/,
    );
    expect(provider.requests).toHaveLength(1);
  });
});
