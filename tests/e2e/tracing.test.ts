import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { createClient, type OrqClient } from '../../src/producers/client.js';
import { answerOneTask } from '../support/fake-answers.js';
import { orq } from '../support/cli.js';
import {
  startFakeLlmServer,
  FAKE_USAGE,
  type FakeLlmRequest,
  type FakeLlmServer,
  type FakeReply,
} from '../support/fake-llm-server.js';
import {
  startOtlpReceiver,
  type OtlpReceiver,
  type ReceivedSpan,
} from '../support/otlp-receiver.js';
import { Pods } from '../support/pods.js';
import { eventually } from '../support/scenarios.js';

let pods: Pods | undefined;
let llm: FakeLlmServer | undefined;
let receiver: OtlpReceiver | undefined;
let client: OrqClient | undefined;
afterEach(async () => {
  await pods?.stopAll('SIGTERM');
  pods = undefined;
  await client?.close();
  client = undefined;
  await llm?.close();
  llm = undefined;
  await receiver?.close();
  receiver = undefined;
});

/**
 * The receiver, the model server, three pods and a CLI submit, all exporting to the receiver,
 * with `env`'s OTEL_* settings added (none: the default encoding).
 */
async function startTracedSession(
  script: (request: FakeLlmRequest) => FakeReply,
  env: Record<string, string> = {},
) {
  receiver = await startOtlpReceiver();
  llm = await startFakeLlmServer('openai', script);
  const prefix = `tr${randomUUID().slice(0, 8)}`;
  const url = inject('redisUrl');
  const otel = {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    // Export at once rather than every 5 s.
    OTEL_BSP_SCHEDULE_DELAY: '50',
    ...env,
  };
  pods = new Pods({ REDIS_URL: url, ORQ_PREFIX: prefix, TRACE_TEST_KEY: 'sk-trace', ...otel });
  await pods.start('planner,coordinator', [], { OTEL_SERVICE_NAME: 'pod-a' });
  await pods.start('judge,replanner', [], { OTEL_SERVICE_NAME: 'pod-b' });
  await pods.start('worker', [], { OTEL_SERVICE_NAME: 'pod-c' });
  const cliEnv = { REDIS_URL: url, ORQ_PREFIX: prefix, OTEL_SERVICE_NAME: 'cli', ...otel };
  const llmConfig = {
    llm: {
      default: {
        provider: 'openai',
        baseUrl: llm.baseUrl,
        model: 'm-test',
        apiKeyEnv: 'TRACE_TEST_KEY',
        timeoutSeconds: 20,
      },
    },
  };
  const submitted = await orq(
    ['submit', 'write the parser', '--session-config', JSON.stringify(llmConfig), '--json'],
    { env: cliEnv },
  );
  expect(submitted.code, submitted.stderr).toBe(0);
  const sessionId = (JSON.parse(submitted.stdout) as { id: string }).id;
  client = await createClient({ connection: url, prefix });
  return { sessionId, cliEnv, client };
}

/** The spans received once one named `name` has arrived. */
function spansUntil(name: string): Promise<ReceivedSpan[]> {
  return eventually(
    () => (receiver!.spans.some((s) => s.name === name) ? receiver!.spans : undefined),
    `the span ${name}`,
    20_000,
  );
}

describe('traces (OpenTelemetry over OTLP/HTTP)', () => {
  it('one session over three pods is one trace, in protobuf by default: each hop the child of its cause, with GenAI spans for the model calls', async () => {
    const { sessionId, client } = await startTracedSession(answerOneTask);
    const view = await client.wait(sessionId, { timeoutMs: 30_000 });
    expect(view.session.state).toBe('COMPLETED');

    // Every hop's span has arrived: the last is the coordinator's task-judged.
    const spans = await spansUntil('coordinator task-judged');
    // No protocol set: the spec's default, http/protobuf, from every process.
    expect(new Set(receiver!.contentTypes)).toEqual(new Set(['application/x-protobuf']));

    // One trace, one root (the submit), and every other span's parent in it.
    expect(new Set(spans.map((s) => s.traceId)).size).toBe(1);
    const byId = new Map(spans.map((s) => [s.spanId, s]));
    const roots = spans.filter((s) => !s.parentSpanId);
    expect(roots.map((s) => s.name)).toEqual(['submit_session']);
    for (const span of spans) {
      if (span.parentSpanId) expect(byId.has(span.parentSpanId), span.name).toBe(true);
    }
    const one = (name: string): ReceivedSpan => {
      const found = spans.filter((s) => s.name === name);
      expect(found, name).toHaveLength(1);
      return found[0]!;
    };
    const parentOf = (span: ReceivedSpan) => byId.get(span.parentSpanId ?? '')?.name;

    // The hops, each the child of the span that enqueued it, on the pod that ran it.
    const submit = one('submit_session');
    const plan = one(`plan ${sessionId}`);
    const judgePlan = one('judge judge-plan');
    const planJudged = one('coordinator plan-judged');
    const execute = one('worker execute');
    const judgeTask = one('judge judge-task');
    const taskJudged = one('coordinator task-judged');
    expect(parentOf(plan)).toBe('submit_session');
    expect(parentOf(judgePlan)).toBe(plan.name);
    expect(parentOf(planJudged)).toBe('judge judge-plan');
    expect(parentOf(execute)).toBe('coordinator plan-judged');
    expect(parentOf(judgeTask)).toBe('worker execute');
    expect(parentOf(taskJudged)).toBe('judge judge-task');
    expect([submit, plan, judgePlan, execute].map((s) => s.resource['service.name'])).toEqual([
      'cli',
      'pod-a',
      'pod-b',
      'pod-c',
    ]);
    expect(plan.attributes).toMatchObject({
      'orq.session.id': sessionId,
      'orq.role': 'planner',
      'gen_ai.operation.name': 'plan',
      'messaging.system': 'bullmq',
      'messaging.destination.name': 'plan',
    });
    expect(execute.attributes).toMatchObject({ 'orq.session.id': sessionId, 'orq.task.id': 't1' });

    // One chat span per model call, under the job that made it, with its tokens.
    const chats = spans.filter((s) => s.name === 'chat m-test');
    expect(chats.map(parentOf).sort()).toEqual(
      [plan.name, 'judge judge-plan', 'worker execute', 'judge judge-task'].sort(),
    );
    for (const chat of chats) {
      expect(chat.kind).toBe(3); // CLIENT
      expect(chat.attributes).toMatchObject({
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': 'openai',
        'gen_ai.request.model': 'm-test',
        'gen_ai.response.model': 'm-test',
        'gen_ai.usage.input_tokens': FAKE_USAGE.input,
        'gen_ai.usage.output_tokens': FAKE_USAGE.output,
        'gen_ai.response.finish_reasons': ['stop'],
        'gen_ai.conversation.id': sessionId,
        'server.address': '127.0.0.1',
      });
      // Content is opt-in.
      expect(chat.attributes['gen_ai.input.messages']).toBeUndefined();
      expect(chat.attributes['gen_ai.output.messages']).toBeUndefined();
    }
  }, 120_000);

  it("a cancel requested later joins the session's trace, under its submit (in OTLP JSON when asked)", async () => {
    // The worker's call never answers: the session is still running when it is cancelled.
    const { sessionId, cliEnv } = await startTracedSession(
      (request) => (request.schemaName === 'TaskOutput' ? { hang: true } : answerOneTask(request)),
      { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' },
    );
    await eventually(
      () => (llm!.requests.some((r) => r.schemaName === 'TaskOutput') ? true : undefined),
      "the worker's model call",
      20_000,
    );
    const cancelled = await orq(['cancel', sessionId], { env: cliEnv });
    expect(cancelled.code, cancelled.stderr).toBe(0);
    const spans = await spansUntil('coordinator cancel');
    const byName = (name: string) => spans.find((s) => s.name === name)!;
    const submit = byName('submit_session');
    const cancel = byName('cancel_session');
    expect(cancel.traceId).toBe(submit.traceId);
    expect(cancel.parentSpanId).toBe(submit.spanId);
    expect(byName('coordinator cancel').parentSpanId).toBe(cancel.spanId);
    expect(new Set(receiver!.contentTypes)).toEqual(new Set(['application/json']));
  }, 120_000);

  it('a grpc protocol is refused before the command runs, naming the variable', async () => {
    const refused = await orq(['list'], {
      env: {
        REDIS_URL: inject('redisUrl'),
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4317',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc',
      },
    });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(
      /^orq: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc is not supported: orq exports traces over OTLP\/HTTP as http\/protobuf or http\/json\./,
    );
    expect(refused.stdout).toBe('');
  });
});
