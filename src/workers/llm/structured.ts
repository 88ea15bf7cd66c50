import { z } from 'zod';
import type { TokenUsage } from '../../shared/domain/task.js';
import type { TokenLogprob } from './score-logprobs.js';
import { describeZodIssues, OrqError, type FieldIssue } from '../../shared/errors.js';
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

/** Keywords Anthropic's JSON outputs (output_config.format) accept as they are. */
const ANTHROPIC_KEYWORDS = new Set([
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
]);
/** String formats Anthropic's JSON outputs accept. */
const ANTHROPIC_FORMATS = new Set([
  'date-time',
  'time',
  'date',
  'duration',
  'email',
  'hostname',
  'uri',
  'ipv4',
  'ipv6',
  'uuid',
]);
/** Constraints Anthropic's JSON outputs refuse: said in the description instead, zod checks them. */
const ANTHROPIC_SPOKEN: Record<string, string> = {
  minimum: 'at least',
  maximum: 'at most',
  exclusiveMinimum: 'more than',
  exclusiveMaximum: 'less than',
  multipleOf: 'a multiple of',
  minLength: 'at least this many characters:',
  maxLength: 'at most this many characters:',
  minItems: 'at least this many items:',
  maxItems: 'at most this many items:',
  pattern: 'matching',
};

/**
 * The JSON Schema for Anthropic's JSON outputs (`output_config.format`): objects closed
 * (additionalProperties false, which it requires), only the keywords it accepts, and the
 * constraints it refuses (numeric and length bounds, patterns, item counts above 1) said in
 * the field's description, so the model still reads them; zod checks them on the reply.
 * `title` names the reply for the model.
 */
export function anthropicJsonSchema(schema: z.ZodType, title: string): JsonObject {
  return { title, ...anthropicNode(replyJsonSchema(schema, { strict: false })) };
}

function anthropicNode(node: JsonObject): JsonObject {
  const out: JsonObject = {};
  const spoken: string[] = [];
  for (const [key, value] of Object.entries(node)) {
    if (ANTHROPIC_KEYWORDS.has(key)) out[key] = value;
    else if (key === 'format' && typeof value === 'string' && ANTHROPIC_FORMATS.has(value))
      out[key] = value;
    else if (key === 'minItems' && (value === 0 || value === 1)) out[key] = value;
    else if (key in ANTHROPIC_SPOKEN) spoken.push(`${ANTHROPIC_SPOKEN[key]} ${String(value)}`);
  }
  if (spoken.length > 0) {
    const said = `(${spoken.join('; ')})`;
    out.description = typeof out.description === 'string' ? `${out.description} ${said}` : said;
  }
  const closed = out.type === 'object' || isObject(out.properties);
  const mapped = mapChildren(out, anthropicNode);
  if (closed) mapped.additionalProperties = false;
  return mapped;
}

/**
 * `node` with each schema it nests (properties, items, anyOf, $defs) rewritten by `rewrite`,
 * in place of the original; `property` names a property's schema. The rest is kept as it is.
 */
function mapChildren(
  node: JsonObject,
  rewrite: (child: JsonObject, property?: string) => JsonObject,
): JsonObject {
  const out = { ...node };
  const each = (child: unknown, property?: string) =>
    isObject(child) ? rewrite(child, property) : child;
  if (isObject(out.properties)) {
    out.properties = Object.fromEntries(
      Object.entries(out.properties).map(([key, child]) => [key, each(child, key)]),
    );
  }
  if (isObject(out.items)) out.items = rewrite(out.items);
  if (Array.isArray(out.anyOf)) out.anyOf = out.anyOf.map((child: unknown) => each(child));
  if (isObject(out.$defs)) {
    out.$defs = Object.fromEntries(
      Object.entries(out.$defs).map(([key, child]) => [key, each(child)]),
    );
  }
  return out;
}

function strictNode(node: JsonObject, required: boolean): JsonObject {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(node)) {
    if (STRICT_KEYWORDS.has(key)) out[key] = value;
  }
  const requiredKeys = new Set(Array.isArray(node.required) ? (node.required as string[]) : []);
  const mapped = mapChildren(out, (child, property) =>
    strictNode(child, property === undefined || requiredKeys.has(property)),
  );
  if (isObject(mapped.properties)) {
    mapped.required = Object.keys(mapped.properties);
    mapped.additionalProperties = false;
  }
  if (required) return mapped;
  if (typeof mapped.type === 'string' && mapped.enum === undefined) {
    return { ...mapped, type: [mapped.type, 'null'] };
  }
  return { anyOf: [mapped, { type: 'null' }] };
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
  /** A reply showed that the server ignored the native format (see ignoredFormat). */
  formatIgnored: boolean;
  /** The validated reply's token log-probabilities, when asked for and returned. */
  tokenLogprobs?: TokenLogprob[];
}

export interface StructuredCallOptions {
  maxRepairAttempts: number;
  /**
   * The role's llm.*.structuredOutput. In native mode the provider should enforce the schema,
   * so an invalid reply that is not a bare JSON object, or lacks a required field, shows a
   * server that ignored the format (servers without response_format, or a tool_choice they
   * drop): `onFormatIgnored` is told, and a final failure says to use prompt mode.
   */
  structuredOutput?: 'native' | 'json' | 'prompt';
  onFormatIgnored?: (detail: { issues: FieldIssue[] }) => void;
  /**
   * Called before each repair turn is sent, with its request and what the turns before it
   * spent (a budget reserves what the turn adds: it sends the prompt again with the bad reply
   * and the correction). Throwing ends the call, with those turns counted as spent.
   */
  beforeRepairTurn?: (turn: ChatRequest, spent: TokenUsage) => Promise<void>;
}

/**
 * Whether an invalid reply in native mode shows that the server ignored the requested format:
 * an enforcing server (OpenAI's strict json_schema, Anthropic's JSON outputs) sends a bare JSON
 * object with every required field; a model left to guess sends prose, fences, or its own
 * shape. A wrong value (out of range, too short, of another type) is not counted: an enforcing
 * server lets some through too, and a repair turn fixes them.
 */
export function ignoredFormat(schema: z.ZodType, raw: string): boolean {
  const whole = tryParse(raw.replace(THINK_BLOCK, '').trim());
  if (!whole.found || !isObject(whole.value)) return true;
  const value = dropNulls(whole.value);
  const result = schema.safeParse(value);
  return (
    !result.success &&
    result.error.issues.some(
      (issue) => issue.code === 'invalid_type' && valueAt(value, issue.path) === undefined,
    )
  );
}

function valueAt(value: unknown, path: readonly PropertyKey[]): unknown {
  let node = value;
  for (const key of path) {
    if (!isObject(node) && !Array.isArray(node)) return undefined;
    node = (node as Record<PropertyKey, unknown>)[key];
  }
  return node;
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
  options: StructuredCallOptions,
): Promise<StructuredReply<z.infer<T>>> {
  let usage = NO_USAGE;
  let followUp: ChatFollowUp | undefined;
  let formatIgnored = false;
  // A repair turn shows the schema: where the provider did not enforce it, the model never saw it.
  const schema = request.tools
    ? undefined
    : JSON.stringify(replyJsonSchema(request.schema, { strict: false }), null, 2);
  for (let repairs = 0; ; repairs += 1) {
    let completion: ChatCompletion;
    try {
      const turn = { ...request, ...(followUp ? { followUp } : {}) };
      if (followUp) await options.beforeRepairTurn?.(turn, usage);
      completion = await provider.complete(turn);
    } catch (error) {
      // A repair turn that fails still leaves the turns before it billed.
      throw withUsageSpent(error, usage);
    }
    usage = addUsage(usage, completion.usage);
    const check = checkReplyText(request.schema, completion.raw);
    if (check.ok) {
      const { tokenLogprobs } = completion;
      return {
        value: check.value,
        usage,
        raw: completion.raw,
        repairs,
        formatIgnored,
        ...(tokenLogprobs ? { tokenLogprobs } : {}),
      };
    }
    const summary = formatIssues(check.issues);
    if (
      !formatIgnored &&
      !request.tools &&
      options.structuredOutput === 'native' &&
      ignoredFormat(request.schema, completion.raw)
    ) {
      formatIgnored = true;
      options.onFormatIgnored?.({ issues: check.issues });
    }
    if (repairs >= options.maxRepairAttempts) {
      throw new OrqError(
        'LLM_OUTPUT_INVALID',
        `The ${request.role} reply from ${provider.label} does not match ${request.schemaName}` +
          ` after ${repairs} repair attempt${repairs === 1 ? '' : 's'}: ${summary}`,
        {
          hint: noToolCall(request, completion.raw)
            ? `The model made no tool call. Use a model with function calling for the ${request.role}, or set llm.${request.role}.toolCalling "structured"`
            : formatIgnored
              ? `The server ignored the requested reply format (response_format or output_config), as servers without structured output do: set llm.${request.role}.structuredOutput "prompt" to put the schema in the prompt`
              : `Use a model that follows JSON schemas better for the ${request.role}, or raise llm.maxRepairAttempts`,
          details: {
            role: request.role,
            schemaName: request.schemaName,
            issues: check.issues,
            repairs,
            usage,
            formatIgnored,
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
        ...(schema ? { schema } : {}),
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
