import { AsyncLocalStorage } from 'node:async_hooks';
import { z } from 'zod';
import type { LlmRoleConfig } from '../../shared/config/schema.js';
import { TokenUsage } from '../../shared/domain/task.js';
import { OrqError } from '../../shared/errors.js';
import { attemptFetch } from './http-attempts.js';
import type { ModelRole } from '../../shared/config/roles.js';
import { DEFAULT_KEY_ENV, providerKey } from '../../shared/config/provider-keys.js';

/**
 * The one thing orq asks of a real model: a system and a user message in, a reply that should
 * be JSON of a given schema out. Providers (openai-provider.ts, anthropic-provider.ts) speak
 * their SDK; structured.ts turns the raw reply into a validated value and repairs it.
 */

import type { TokenLogprob } from './score-logprobs.js';

/** A repair turn: the model's previous reply and what was wrong with it. */
export interface ChatFollowUp {
  reply: string;
  correction: string;
}

/** A tool the model may call through the provider's native function calling. */
export interface ChatTool {
  name: string;
  description: string;
  /** JSON Schema (an object schema) of the tool's input. */
  inputSchema: Record<string, unknown>;
}

/**
 * The reply to a request with `tools`: the call the model made, which providers put in `raw`
 * as JSON of this shape, so validation, repair turns, metering and recordings stay as for any
 * structured reply.
 */
export const ToolCallReply = z.object({
  tool: z.string().min(1),
  input: z.record(z.string(), z.unknown()),
});
export type ToolCallReply = z.infer<typeof ToolCallReply>;

export interface ChatRequest {
  /** Who is calling: names the call in errors, logs and recordings. */
  role: ModelRole;
  system: string;
  user: string;
  followUp?: ChatFollowUp;
  /** The reply's schema; its JSON Schema goes to the provider's structured-output mode. */
  schema: z.ZodType;
  schemaName: string;
  /** Sent only when the role's config sets it: some models refuse any but their default. */
  temperature?: number | undefined;
  /** Limit of the whole call, the SDK's retries included. */
  timeoutMs: number;
  /** Aborted when the session is cancelled. */
  signal?: AbortSignal;
  /**
   * Native function calling: the model must call one of these tools (OpenAI tools with
   * tool_choice required, Anthropic tools with tool_choice any), and `raw` is the call as a
   * ToolCallReply; `schema` should be ToolCallReply then.
   */
  tools?: readonly ChatTool[];
  /**
   * Index of one of several samples of the same request (the judge's median-of-k): not sent
   * to the model, but part of a recording's key so each sample replays its own reply.
   */
  sample?: number;
  /**
   * The mode of this call where it differs from llm.*.structuredOutput: prompt, after the
   * role's server ignored the native format (llm-models.ts).
   */
  structuredOutput?: LlmRoleConfig['structuredOutput'];
  /**
   * Ask for the reply's token log-probabilities with this many alternatives per token (OpenAI
   * `logprobs`, `top_logprobs`); providers without them ignore it.
   */
  topLogprobs?: number;
}

export interface ChatCompletion {
  /** The reply as text: message content, or a reply tool's input as JSON. */
  raw: string;
  /** Tokens billed for this call (input includes cached input). */
  usage: TokenUsage;
  /** The reply's tokens with their alternatives, when asked for and the server returned them. */
  tokenLogprobs?: TokenLogprob[];
  /** The model that answered, as the server names it (traces: gen_ai.response.model). */
  responseModel?: string;
  /** Why the model stopped (finish_reason, stop_reason), as the server says it. */
  finishReasons?: string[];
}

export interface ChatProvider {
  /** e.g. `openai:gpt-4o-mini`. */
  readonly label: string;
  complete(request: ChatRequest): Promise<ChatCompletion>;
  /**
   * Loads what the first call would (the SDK, its client), so a quota granted next is spent
   * by a request sent at once, not a second later: late requests arrive at the provider
   * bunched, more of them within its window than the quota allowed.
   */
  ready?(): Promise<void>;
}

export const NO_USAGE: TokenUsage = { inputTokens: 0, outputTokens: 0 };

export function addUsage(a: TokenUsage, b: TokenUsage): TokenUsage {
  return {
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
  };
}

/** A non-negative integer from whatever a server put in its usage field. */
export function tokenCount(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.round(value) : 0;
}

// ---------------------------------------------------------------------------------------------
// API keys

/**
 * Local OpenAI-compatible servers (Ollama, vLLM, LM Studio) take any key, but the SDK insists
 * on one: this placeholder is sent when a baseUrl is set and no key is.
 */
export const PLACEHOLDER_API_KEY = 'orq-no-key';

/**
 * The key for a role's provider, from the variable named by `apiKeyEnv` or the provider's usual
 * one, or the file its `_FILE` variable names (provider-keys.ts). A missing key is an error naming the variable. A custom baseUrl with no `apiKeyEnv` (a
 * local server) gets the placeholder, never the provider's usual key: OPENAI_API_KEY must not
 * be sent to whatever server a baseUrl names, over plain http at that.
 */
export function resolveApiKey(
  role: ModelRole,
  config: Pick<LlmRoleConfig, 'provider' | 'apiKeyEnv' | 'baseUrl'>,
  env: NodeJS.ProcessEnv = process.env,
): string {
  if (config.provider === 'builtin') return PLACEHOLDER_API_KEY;
  if (config.baseUrl && !config.apiKeyEnv) return PLACEHOLDER_API_KEY;
  const variable = config.apiKeyEnv ?? DEFAULT_KEY_ENV[config.provider];
  const key = providerKey(variable, env);
  if (key) return key;
  throw new OrqError(
    'CONFIG_INVALID',
    `No API key for the ${role} model (${config.provider}): neither ${variable} nor ${variable}_FILE is set`,
    {
      hint: `Export ${variable} (or ${variable}_FILE, the path of a file holding the key) in the environment of every process that runs the ${role} role, or name another variable in llm.${role}.apiKeyEnv`,
      details: { role, provider: config.provider, apiKeyEnv: variable },
    },
  );
}

/** The HTTP statuses the attempts of the call running now were answered with (withAnswers). */
const callAnswers = new AsyncLocalStorage<number[]>();

/** Told of each 429 answer of the call running now, with its headers (observeRateLimits). */
const rateLimitObservers = new AsyncLocalStorage<(headers: Headers) => void>();

/**
 * fetch that notes each answer's status for the call it runs in: the SDKs retry inside a call.
 * Under a provider quota (observeRateLimits) a 429 is reported with its headers and marked
 * `x-should-retry: false`, which both SDKs obey before their own rules: their immediate retry
 * (every pod sleeping the same Retry-After, then all sending at once) would defeat the pause
 * the quota shares between pods. 5xx and timeouts are still retried by the SDK.
 */
const notingFetch: typeof fetch = async (input, init) => {
  const response = await attemptFetch(input, init);
  callAnswers.getStore()?.push(response.status);
  const observer = response.status === 429 ? rateLimitObservers.getStore() : undefined;
  if (!observer) return response;
  observer(response.headers);
  const headers = new Headers(response.headers);
  headers.set('x-should-retry', 'false');
  return new Response(response.body, {
    status: response.status,
    statusText: response.statusText,
    headers,
  });
};

/** Runs `call`, telling `onRateLimited` of every 429 its SDK requests are answered with. */
export function observeRateLimits<T>(
  onRateLimited: (headers: Headers) => void,
  call: () => Promise<T>,
): Promise<T> {
  return rateLimitObservers.run(onRateLimited, call);
}

/** Runs one SDK call, noting in `answers` the status of every HTTP answer its attempts got. */
export function withAnswers<T>(answers: number[], call: () => Promise<T>): Promise<T> {
  return callAnswers.run(answers, call);
}

/** Statuses as a person reads them: `429 ×3, 503`. */
export function describeAnswers(answers: readonly number[]): string {
  const counts = new Map<number, number>();
  for (const status of answers) counts.set(status, (counts.get(status) ?? 0) + 1);
  return [...counts].map(([status, n]) => (n > 1 ? `${status} ×${n}` : String(status))).join(', ');
}

/**
 * The client options both SDKs take alike. The key is always explicit: without one the
 * Anthropic SDK would look for credential profiles on disk.
 */
export function sdkClientOptions(config: LlmRoleConfig, apiKey: string) {
  return {
    fetch: notingFetch,
    apiKey,
    ...(config.baseUrl ? { baseURL: config.baseUrl } : {}),
    maxRetries: config.maxRetries,
    timeout: config.timeoutSeconds * 1000,
    logLevel: 'off' as const,
  };
}

// ---------------------------------------------------------------------------------------------
// Deadlines, cancellation and error mapping

/** AbortSignal.timeout() aborts with a TimeoutError; a caller's own deadline counts as one. */
const isTimeoutReason = (signal: AbortSignal | undefined): boolean =>
  (signal?.reason as { name?: unknown } | undefined)?.name === 'TimeoutError';

/**
 * The request's own signal combined with its deadline; tells afterwards which one fired. A
 * caller's signal that fired on a timeout (the replanner's seed 001 limit) is a timeout too.
 */
export function callSignal(request: Pick<ChatRequest, 'signal' | 'timeoutMs'>): {
  signal: AbortSignal;
  timedOut(): boolean;
  cancelled(): boolean;
} {
  const deadline = AbortSignal.timeout(Math.max(1, Math.round(request.timeoutMs)));
  const signal = request.signal ? AbortSignal.any([request.signal, deadline]) : deadline;
  const callerAborted = () => request.signal?.aborted === true;
  return {
    signal,
    timedOut: () =>
      (deadline.aborted && !callerAborted()) ||
      (callerAborted() && isTimeoutReason(request.signal)),
    cancelled: () => callerAborted() && !isTimeoutReason(request.signal),
  };
}

/**
 * Settles with `promise`, or rejects with the signal's reason as soon as `signal` aborts. The
 * openai SDK sleeps out a server's Retry-After, uncapped (an hour is honoured), without watching
 * the signal: a call would outlive its deadline and a cancel. The SDK checks the signal before
 * its next request, so the abandoned call sends nothing more; its rejection is caught here.
 */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  promise.catch(() => undefined);
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error as Error);
      },
    );
  });
}

export interface CallTarget {
  role: ModelRole;
  /** Which SDK builds the URL from baseUrl: they add different paths to it. */
  provider: 'openai' | 'anthropic';
  label: string;
  baseUrl?: string | undefined;
  timeoutMs: number;
  maxRetries: number;
  apiKeyEnv?: string | undefined;
}

/** The error classes both official SDKs (openai, @anthropic-ai/sdk) export under these names. */
export interface SdkErrorClasses {
  APIError: abstract new (...args: never[]) => Error & { status?: number | undefined };
  APIConnectionError: abstract new (...args: never[]) => Error;
  APIConnectionTimeoutError: abstract new (...args: never[]) => Error;
  APIUserAbortError: abstract new (...args: never[]) => Error;
}

/**
 * Translates what an SDK call threw into callFailure's kinds (checked from the most specific:
 * our own deadline or the caller's abort first); anything else is returned unchanged.
 */
export function sdkCallFailure(
  error: unknown,
  call: Pick<ReturnType<typeof callSignal>, 'timedOut' | 'cancelled'>,
  target: CallTarget,
  sdk: SdkErrorClasses,
  answers: readonly number[] = [],
): unknown {
  if (call.timedOut() || error instanceof sdk.APIConnectionTimeoutError) {
    return callFailure('timeout', target, { message: '', cause: error, answers });
  }
  if (call.cancelled() || error instanceof sdk.APIUserAbortError) {
    return callFailure('cancelled', target, { message: '', cause: error });
  }
  if (error instanceof sdk.APIConnectionError) {
    return callFailure('connection', target, { message: rootCause(error), cause: error });
  }
  if (error instanceof sdk.APIError) {
    return callFailure('http', target, {
      message: apiErrorMessage(error),
      cause: error,
      ...(typeof error.status === 'number' ? { status: error.status } : {}),
    });
  }
  if (error instanceof SyntaxError) {
    // A 200 whose body is not JSON: a proxy's error page, or a server that cut the body off.
    return callFailure('reply', target, {
      message: `the response body is not JSON (${error.message})`,
      cause: error,
      hint: target.baseUrl
        ? `Check that ${target.baseUrl} is the model server's API, not a page or a proxy in front of it`
        : 'Check for a proxy between this pod and the provider',
    });
  }
  return error;
}

/**
 * Where an official SDK's calls for `role` go, as their failures name it (each call adds its
 * time limit): fixed for a provider, so built once with it.
 */
export function sdkCallTarget(
  role: ModelRole,
  provider: CallTarget['provider'],
  config: Pick<LlmRoleConfig, 'model' | 'baseUrl' | 'maxRetries' | 'apiKeyEnv'>,
  defaultKeyEnv: string,
): Omit<CallTarget, 'timeoutMs'> {
  return {
    role,
    provider,
    label: `${provider}:${config.model}`,
    baseUrl: config.baseUrl,
    maxRetries: config.maxRetries,
    apiKeyEnv: config.apiKeyEnv ?? (config.baseUrl ? undefined : defaultKeyEnv),
  };
}

/** What both official SDKs take with a request: orq's signal, time limit and retries. */
export interface SdkRequestOptions {
  signal: AbortSignal;
  timeout: number;
  maxRetries: number;
}

/**
 * One request through an official SDK under orq's rules for a call: it ends when the request's
 * signal aborts or its time limit (retries included) runs out, even if the SDK does not notice;
 * the HTTP statuses of its tries are kept for the message; and whatever it throws becomes
 * callFailure's kind for `target`.
 */
export async function sdkRequest<T>(
  target: CallTarget,
  request: Pick<ChatRequest, 'signal' | 'timeoutMs'>,
  sdk: SdkErrorClasses,
  send: (options: SdkRequestOptions) => Promise<T>,
): Promise<T> {
  const call = callSignal(request);
  const answers: number[] = [];
  try {
    return await untilAborted(
      withAnswers(answers, () =>
        send({
          signal: call.signal,
          timeout: Math.max(1, Math.round(request.timeoutMs)),
          maxRetries: target.maxRetries,
        }),
      ),
      call.signal,
    );
  } catch (error) {
    throw sdkCallFailure(error, call, target, sdk, answers);
  }
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null;

/**
 * What the server said went wrong, from the error body the SDK parsed (`error`): OpenAI's
 * `{message, type}`, or Anthropic's `{type: "error", error: {type, message}}`, which its SDK
 * would otherwise show as raw JSON. Else the SDK's message without the status it starts with
 * (the failure names the status itself).
 */
export function apiErrorMessage(error: Error & { error?: unknown }): string {
  const body = error.error;
  const inner = isRecord(body) && isRecord(body.error) ? body.error : body;
  if (isRecord(inner) && typeof inner.message === 'string' && inner.message !== '') {
    const type = typeof inner.type === 'string' && inner.type !== 'error' ? inner.type : undefined;
    return type ? `${type}: ${inner.message}` : inner.message;
  }
  return error.message.replace(/^\d{3} /, '');
}

/**
 * The innermost cause of a connection error, with its code: the SDK's "Connection error."
 * wraps fetch's "fetch failed", which wraps what went wrong (connect ECONNREFUSED 127.0.0.1:9).
 */
export function rootCause(error: Error): string {
  let deepest: Error = error;
  for (let depth = 0; depth < 5 && deepest.cause instanceof Error; depth += 1) {
    deepest = deepest.cause;
  }
  const code = (deepest as { code?: unknown }).code;
  const message = deepest.message || error.message;
  return typeof code === 'string' && !message.includes(code) ? `${message} (${code})` : message;
}

export type CallFailureKind = 'cancelled' | 'timeout' | 'connection' | 'http' | 'reply';

export interface CallFailureDetail {
  message: string;
  status?: number;
  /** The statuses the call's attempts were answered with before it failed (withAnswers). */
  answers?: readonly number[];
  cause?: unknown;
  /** Tokens the server billed for the failed call (a reply cut off or unusable). */
  usage?: TokenUsage;
  /** The reply was cut off at the output token limit: asking again cannot help. */
  truncated?: boolean;
  /** What to do, where the kind's usual hint does not fit. */
  hint?: string;
}

/** A provider failure as an OrqError with the role, the model and what the user can do. */
export function callFailure(
  kind: CallFailureKind,
  target: CallTarget,
  detail: CallFailureDetail,
): OrqError {
  const { role, label } = target;
  const details: Record<string, unknown> = {
    role,
    model: label,
    kind,
    ...(target.baseUrl ? { baseUrl: target.baseUrl } : {}),
    ...(detail.status !== undefined ? { status: detail.status } : {}),
    ...(detail.usage ? { usage: detail.usage } : {}),
    ...(detail.truncated ? { truncated: true } : {}),
    ...(detail.answers?.length ? { answers: detail.answers } : {}),
  };
  const options = (hint?: string) => ({ details, cause: detail.cause, ...(hint ? { hint } : {}) });
  switch (kind) {
    case 'cancelled': {
      const error = new OrqError(
        'LLM_CALL_FAILED',
        `The ${role} call to ${label} was cancelled`,
        options(),
      );
      // Like fetch: callers that test for AbortError treat it as a cancellation, not a fault.
      error.name = 'AbortError';
      return error;
    }
    case 'timeout':
      return new OrqError(
        'LLM_CALL_FAILED',
        `The ${role} call to ${label} timed out after ${target.timeoutMs / 1000}s` +
          (detail.answers?.length
            ? ` (the server had answered ${describeAnswers(detail.answers)})`
            : ''),
        options(
          role === 'replanner'
            ? 'Raise replanning.timeoutSeconds, or use a faster model for the replanner'
            : `Raise llm.${role}.timeoutSeconds, or use a faster model for the ${role}`,
        ),
      );
    case 'connection':
      return new OrqError(
        'LLM_CALL_FAILED',
        `The ${role} model ${label} is unreachable${target.baseUrl ? ` at ${target.baseUrl}` : ''}: ${detail.message}`,
        options(
          target.baseUrl
            ? 'Check that the server runs and that baseUrl is right (OpenAI-compatible servers end in /v1, e.g. http://localhost:11434/v1 for Ollama)'
            : 'Check the network connection of this pod',
        ),
      );
    case 'http':
      return new OrqError(
        'LLM_CALL_FAILED',
        `The ${role} call to ${label} failed with HTTP ${detail.status ?? '?'}: ${detail.message}`,
        options(httpHint(detail.status, target, detail.message)),
      );
    case 'reply':
      return new OrqError(
        'LLM_CALL_FAILED',
        `The ${role} model ${label} gave no usable reply: ${detail.message}`,
        options(
          detail.hint ?? (detail.truncated ? `Raise llm.${role}.maxOutputTokens` : undefined),
        ),
      );
  }
}

/**
 * HTTP statuses that the same request fails with on any pod: the model or the request is
 * refused. A rejected key (401, 403) is not one: another pod of the role may hold another key,
 * as a missing key is retried for the same reason.
 */
const PERMANENT_HTTP_STATUSES = new Set([400, 404, 422]);

/**
 * Whether a failed call would fail the same way if its job ran again, on any pod: a refused
 * model or request, a reply cut off at the output limit. Rate limits, server errors, timeouts,
 * keys and unusable replies may pass on a retry.
 */
export function isPermanentCallFailure(error: unknown): boolean {
  if (!(error instanceof OrqError) || error.code !== 'LLM_CALL_FAILED') return false;
  const { kind, status, truncated } = error.details;
  if (kind === 'http') return typeof status === 'number' && PERMANENT_HTTP_STATUSES.has(status);
  return kind === 'reply' && truncated === true;
}

/** The tokens a failed call was billed for, as its error carries them (details.usage). */
export function usageOfFailure(error: unknown): TokenUsage | undefined {
  if (!(error instanceof OrqError)) return undefined;
  const usage = TokenUsage.safeParse(error.details.usage);
  return usage.success ? usage.data : undefined;
}

/**
 * Adds `usage` (what earlier calls of the same request spent: repair turns) to what `error`
 * carries, so the meter counts every billed token of a request that failed in the end.
 * Mutates the error's details: it is the error the caller rethrows.
 */
export function withUsageSpent(error: unknown, usage: TokenUsage): unknown {
  if (!(error instanceof OrqError)) return error;
  if (usage.inputTokens === 0 && usage.outputTokens === 0) return error;
  error.details.usage = addUsage(usageOfFailure(error) ?? NO_USAGE, usage);
  return error;
}

/**
 * A 404 is most often a baseUrl with one `/v1` too many or too few: the Anthropic SDK adds
 * `/v1/messages` itself, the OpenAI SDK only `/chat/completions`.
 */
function notFoundHint(target: CallTarget): string {
  const check = `Check llm.${target.role}.model and llm.${target.role}.baseUrl`;
  const base = target.baseUrl?.replace(/\/+$/, '');
  if (!base) return check;
  const endsInV1 = /\/v1$/.test(base);
  if (target.provider === 'anthropic' && endsInV1) {
    return `${check}: the Anthropic SDK adds /v1/messages to baseUrl itself, so leave /v1 out (${base.slice(0, -3)})`;
  }
  if (target.provider === 'openai' && !endsInV1) {
    return `${check}: OpenAI-compatible servers usually serve their API under /v1 (${base}/v1)`;
  }
  return check;
}

/**
 * What to change for a request the server refused (400), from what it said it refused: tools,
 * the temperature, the output cap, or the structured-output format.
 */
export function badRequestHint(role: ModelRole, provider: CallTarget['provider'], said: string) {
  const text = said.toLowerCase();
  if (/context length|context window|maximum context/.test(text)) {
    return `The prompt and the reply do not fit the model's context: raise the server's context length (vLLM --max-model-len, Ollama OLLAMA_CONTEXT_LENGTH), lower llm.${role}.maxOutputTokens, or use a model with a longer context`;
  }
  if (/\btools?\b|tool_choice|function call/.test(text)) {
    return `The model does not take tools as sent: set llm.${role}.toolCalling "structured"`;
  }
  if (text.includes('temperature')) {
    return `The model refuses this temperature: remove llm.${role}.temperature (and llm.default.temperature), so none is sent`;
  }
  if (/max_tokens|max_completion_tokens|max_output_tokens/.test(text)) {
    return `Set llm.${role}.maxOutputTokens within the model's output limit`;
  }
  if (/response_format|json_schema|json_object|structured output/.test(text)) {
    return `The server has no structured output of this kind: set llm.${role}.structuredOutput "json" or "prompt"`;
  }
  return `The server refused the request (see what it said); check llm.${role}.model, and for a server without structured output set llm.${role}.structuredOutput "json" or "prompt"`;
}

function httpHint(
  status: number | undefined,
  target: CallTarget,
  said: string,
): string | undefined {
  if ((status === 401 || status === 403) && !target.apiKeyEnv && target.baseUrl)
    return `No key was sent: orq sends a key to a baseUrl only from the variable named in llm.${target.role}.apiKeyEnv`;
  if (status === 401 || status === 403)
    return `Check the API key${target.apiKeyEnv ? ` in ${target.apiKeyEnv}` : ''} and its permissions`;
  if (status === 404) return notFoundHint(target);
  if (status === 429 || (status !== undefined && status >= 500))
    return `Still failing after ${target.maxRetries} retries; raise llm.${target.role}.maxRetries or try later`;
  if (status === 400) return badRequestHint(target.role, target.provider, said);
  return undefined;
}
