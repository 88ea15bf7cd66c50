import { createHash, randomUUID } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { TokenUsage } from '../../shared/domain/task.js';
import { OrqError } from '../../shared/errors.js';
import type { ChatCompletion, ChatProvider, ChatRequest } from './chat.js';
import { replyJsonSchema } from './structured.js';

/**
 * Record and replay of model calls, so a real run can become a deterministic test. In `record`
 * mode every request/response pair is written to `<dir>/<hash>.json`, the hash being SHA-256 of
 * the canonical request (provider, model, role, schema, messages, temperature, sample; never the key,
 * the base URL, the timeout or ids that differ between runs). In `replay` mode the recording
 * answers and nothing is sent; a request that was not recorded is an error naming its hash.
 * One file per request makes concurrent recording from many processes safe (atomic rename).
 */

export type RecordMode = 'record' | 'replay';

export interface RecordReplayOptions {
  mode: RecordMode;
  /** Directory of the recording; relative paths resolve against the process's cwd. */
  path: string;
  /** Identify the model in the hash, so a recording for one model never answers another. */
  provider: string;
  model: string;
  /** The real provider; created only when needed (replay needs no key and no network). */
  inner: () => ChatProvider;
}

export const RecordedCall = z.object({
  hash: z.string(),
  role: z.string(),
  schemaName: z.string(),
  provider: z.string(),
  model: z.string(),
  request: z.object({
    system: z.string(),
    user: z.string(),
    followUp: z.object({ reply: z.string(), correction: z.string() }).optional(),
    temperature: z.number().optional(),
  }),
  reply: z.object({ raw: z.string(), usage: TokenUsage }),
  recordedAt: z.string(),
});
export type RecordedCall = z.infer<typeof RecordedCall>;

/** JSON with object keys sorted, so equal requests hash equally whatever their key order. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

export function requestHash(
  identity: { provider: string; model: string },
  request: ChatRequest,
): string {
  const canonical = canonicalJson({
    v: 1,
    provider: identity.provider,
    model: identity.model,
    role: request.role,
    schemaName: request.schemaName,
    schema: replyJsonSchema(request.schema, { strict: false }),
    system: request.system,
    user: request.user,
    followUp: request.followUp,
    temperature: request.temperature,
    sample: request.sample,
    // Absent for every request without tools, so their hashes (and recordings) stay as they were.
    tools: request.tools,
  });
  return createHash('sha256').update(canonical).digest('hex');
}

export function withRecordReplay(options: RecordReplayOptions): ChatProvider {
  const dir = resolve(options.path);
  const identity = { provider: options.provider, model: options.model };
  let inner: ChatProvider | undefined;
  const real = () => (inner ??= options.inner());
  const label = `${options.provider}:${options.model} (${options.mode} ${dir})`;

  async function replay(request: ChatRequest, hash: string): Promise<ChatCompletion> {
    if (request.signal?.aborted) {
      const error = new OrqError('LLM_CALL_FAILED', `The ${request.role} call was cancelled`);
      error.name = 'AbortError';
      throw error;
    }
    const file = join(dir, `${hash}.json`);
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      throw new OrqError(
        'LLM_CALL_FAILED',
        `No recorded reply for the ${request.role} request ${hash} (${request.schemaName}) in ${dir}`,
        {
          hint: 'The request differs from every recorded one (instruction, prompt, model or config changed); record the run again with llm.record.mode "record"',
          details: { role: request.role, hash, schemaName: request.schemaName, path: dir },
        },
      );
    }
    const parsed = RecordedCall.safeParse(JSON.parse(text));
    if (!parsed.success) {
      throw new OrqError('LLM_CALL_FAILED', `The recording ${file} is not a recorded call`, {
        details: { role: request.role, hash, path: file },
      });
    }
    return { raw: parsed.data.reply.raw, usage: parsed.data.reply.usage };
  }

  async function record(request: ChatRequest, hash: string): Promise<ChatCompletion> {
    const reply = await real().complete(request);
    const entry: RecordedCall = {
      hash,
      role: request.role,
      schemaName: request.schemaName,
      ...identity,
      request: {
        system: request.system,
        user: request.user,
        ...(request.followUp ? { followUp: request.followUp } : {}),
        ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
      },
      reply: { raw: reply.raw, usage: reply.usage },
      recordedAt: new Date().toISOString(),
    };
    await mkdir(dir, { recursive: true });
    // Write then rename: a reader (or a second recorder) never sees half a file.
    const temp = join(dir, `.${hash}.${randomUUID()}.tmp`);
    await writeFile(temp, `${JSON.stringify(entry, null, 2)}\n`);
    await rename(temp, join(dir, `${hash}.json`));
    return reply;
  }

  return {
    label,
    complete(request: ChatRequest): Promise<ChatCompletion> {
      const hash = requestHash(identity, request);
      return options.mode === 'replay' ? replay(request, hash) : record(request, hash);
    },
  };
}
