import { z } from 'zod';
import type { TokenUsage } from '../domain/task.js';
import { describeZodIssues, OrqError, type FieldIssue } from '../errors.js';
import {
  addUsage,
  NO_USAGE,
  ToolCallReply,
  withUsageSpent,
  type ChatCompletion,
  type ChatFollowUp,
  type ChatProvider,
  type ChatRequest,
} from './chat.js';
import { repairPrompt } from './prompts.js';

/**
 * Structured output: the JSON Schema of a reply comes from its zod schema; a reply is parsed
 * leniently (code fences, prose around the JSON, reasoning blocks), validated with zod, and an
 * invalid one gets a bounded number of repair turns carrying the validation error.
 */

// ---------------------------------------------------------------------------------------------
// JSON Schema

/** Keywords OpenAI's strict structured-output mode accepts; others make it reject the schema. */
const STRICT_KEYWORDS = new Set([
  'type',
  'properties',
  'required',
  'additionalProperties',
  'items',
  'enum',
  'const',
  'anyOf',
  'description',
  'title',
  'pattern',
  'format',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minItems',
  'maxItems',
  '$ref',
  '$defs',
]);

type JsonObject = Record<string, unknown>;

const isObject = (value: unknown): value is JsonObject =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * The JSON Schema of what a model should send: the input side of the zod schema (fields with
 * defaults may be left out). `strict` rewrites it for OpenAI's strict mode: every property
 * required, optional ones nullable (nulls are dropped again before validation, see dropNulls),
 * no additional properties, and only the keywords strict mode knows; zod still checks the rest.
 */
export function replyJsonSchema(schema: z.ZodType, options: { strict: boolean }): JsonObject {
  const { $schema: _ignored, ...json } = z.toJSONSchema(schema, {
    io: 'input',
    unrepresentable: 'any',
  }) as JsonObject;
  return options.strict ? strictNode(json, true) : json;
}

function strictNode(node: JsonObject, required: boolean): JsonObject {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(node)) {
    if (STRICT_KEYWORDS.has(key)) out[key] = value;
  }
  const properties = out.properties;
  if (isObject(properties)) {
    const requiredKeys = new Set(Array.isArray(node.required) ? (node.required as string[]) : []);
    out.properties = Object.fromEntries(
      Object.entries(properties).map(([key, child]) => [
        key,
        isObject(child) ? strictNode(child, requiredKeys.has(key)) : child,
      ]),
    );
    out.required = Object.keys(properties);
    out.additionalProperties = false;
  }
  const items = out.items;
  if (isObject(items)) out.items = strictNode(items, true);
  if (Array.isArray(out.anyOf)) {
    out.anyOf = out.anyOf.map((child: unknown) =>
      isObject(child) ? strictNode(child, true) : child,
    );
  }
  const defs = out.$defs;
  if (isObject(defs)) {
    out.$defs = Object.fromEntries(
      Object.entries(defs).map(([key, child]) => [
        key,
        isObject(child) ? strictNode(child, true) : child,
      ]),
    );
  }
  if (required) return out;
  if (typeof out.type === 'string' && out.enum === undefined) {
    return { ...out, type: [out.type, 'null'] };
  }
  return { anyOf: [out, { type: 'null' }] };
}

// ---------------------------------------------------------------------------------------------
// Lenient parsing

/** Reasoning models (deepseek-r1, qwen3 on Ollama) put their thoughts before the answer. */
const THINK_BLOCK = /<think>[\s\S]*?<\/think>/gi;
const FENCE = /```[ \t]*(?:jsonc?|JSON)?[ \t]*\r?\n?([\s\S]*?)```/g;
/** Bounds the scan of a long prose reply for a JSON value. */
const MAX_CANDIDATES = 200;

export type ExtractedJson = { found: true; value: unknown } | { found: false };

/**
 * The JSON value in a model reply: the whole reply, else the first code fence that parses,
 * else the first balanced `{…}` or `[…]` in the prose that parses.
 */
export function extractJson(reply: string): ExtractedJson {
  const text = reply.replace(THINK_BLOCK, '').trim();
  const whole = tryParse(text);
  if (whole.found) return whole;
  for (const match of text.matchAll(FENCE)) {
    const fenced = tryParse((match[1] ?? '').trim());
    if (fenced.found) return fenced;
  }
  let candidates = 0;
  for (let start = 0; start < text.length && candidates < MAX_CANDIDATES; start += 1) {
    const ch = text[start];
    if (ch !== '{' && ch !== '[') continue;
    candidates += 1;
    const end = matchingBracket(text, start);
    if (end === -1) continue;
    const parsed = tryParse(text.slice(start, end + 1));
    if (parsed.found && typeof parsed.value === 'object' && parsed.value !== null) return parsed;
  }
  return { found: false };
}

function tryParse(text: string): ExtractedJson {
  if (text === '') return { found: false };
  try {
    return { found: true, value: JSON.parse(text) as unknown };
  } catch {
    return { found: false };
  }
}

/** Index of the bracket closing the one at `start`, skipping brackets inside strings; -1 if none. */
function matchingBracket(text: string, start: number): number {
  const stack: string[] = [];
  let inString = false;
  for (let i = start; i < text.length; i += 1) {
    const ch = text[i];
    if (inString) {
      if (ch === '\\') i += 1;
      else if (ch === '"') inString = false;
      continue;
    }
    if (ch === '"') inString = true;
    else if (ch === '{') stack.push('}');
    else if (ch === '[') stack.push(']');
    else if (ch === '}' || ch === ']') {
      if (stack.pop() !== ch) return -1;
      if (stack.length === 0) return i;
    }
  }
  return -1;
}

/** Removes null-valued object fields, deeply: strict-mode models send null for "absent". */
export function dropNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(dropNulls);
  if (!isObject(value)) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([, v]) => v !== null)
      .map(([k, v]) => [k, dropNulls(v)]),
  );
}

export type ReplyCheck<T> = { ok: true; value: T } | { ok: false; issues: FieldIssue[] };

/** Parses and validates one reply. */
export function checkReplyText<T extends z.ZodType>(
  schema: T,
  reply: string,
): ReplyCheck<z.infer<T>> {
  const extracted = extractJson(reply);
  if (!extracted.found) {
    return {
      ok: false,
      issues: [{ path: '(root)', message: 'the reply contains no JSON object' }],
    };
  }
  const result = schema.safeParse(dropNulls(extracted.value));
  if (result.success) return { ok: true, value: result.data };
  return { ok: false, issues: describeZodIssues(result.error) };
}

export const formatIssues = (issues: readonly FieldIssue[]): string =>
  issues.map((i) => `${i.path}: ${i.message}`).join('; ');

// ---------------------------------------------------------------------------------------------
// The call with repair

export interface StructuredReply<T> {
  value: T;
  /** Tokens of every call made, repairs included. */
  usage: TokenUsage;
  /** The reply text that validated. */
  raw: string;
  /** Repair turns it took (0: the first reply was valid). */
  repairs: number;
}

const MAX_REPLY_IN_ERROR = 2000;

/**
 * One structured call: ask, validate, and on an invalid reply ask again with the reply and the
 * validation error, at most `maxRepairAttempts` times; then LLM_OUTPUT_INVALID naming the
 * schema and the fields (its details carry the usage spent, so a meter can count it).
 */
export async function callStructured<T extends z.ZodType>(
  provider: ChatProvider,
  request: ChatRequest & { schema: T },
  options: { maxRepairAttempts: number },
): Promise<StructuredReply<z.infer<T>>> {
  let usage = NO_USAGE;
  let followUp: ChatFollowUp | undefined;
  for (let repairs = 0; ; repairs += 1) {
    let completion: ChatCompletion;
    try {
      completion = await provider.complete({ ...request, ...(followUp ? { followUp } : {}) });
    } catch (error) {
      // A repair turn that fails still leaves the turns before it billed.
      throw withUsageSpent(error, usage);
    }
    usage = addUsage(usage, completion.usage);
    const check = checkReplyText(request.schema, completion.raw);
    if (check.ok) return { value: check.value, usage, raw: completion.raw, repairs };
    const summary = formatIssues(check.issues);
    if (repairs >= options.maxRepairAttempts) {
      throw new OrqError(
        'LLM_OUTPUT_INVALID',
        `The ${request.role} reply from ${provider.label} does not match ${request.schemaName}` +
          ` after ${repairs} repair attempt${repairs === 1 ? '' : 's'}: ${summary}`,
        {
          hint: noToolCall(request, completion.raw)
            ? `The model made no tool call. Use a model with function calling for the ${request.role}, or set llm.${request.role}.toolCalling "structured"`
            : `Use a model that follows JSON schemas better for the ${request.role}, or raise llm.maxRepairAttempts`,
          details: {
            role: request.role,
            schemaName: request.schemaName,
            issues: check.issues,
            repairs,
            usage,
            reply: completion.raw.slice(0, MAX_REPLY_IN_ERROR),
          },
        },
      );
    }
    followUp = {
      reply: completion.raw,
      correction: repairPrompt({
        schemaName: request.schemaName,
        errors: summary,
        toolCall: request.tools !== undefined,
      }),
    };
  }
}

/**
 * A request that offered tools got a reply that names no tool (prose, a bare object), as
 * providers pass on a model's text when it made no call. A call with bad input names its tool.
 */
function noToolCall(request: ChatRequest, raw: string): boolean {
  if (!request.tools) return false;
  const extracted = extractJson(raw);
  return !extracted.found || !ToolCallReply.shape.tool.safeParse(toolName(extracted.value)).success;
}

const toolName = (value: unknown): unknown => (isObject(value) ? value.tool : undefined);
