import type OpenAI from 'openai';
import type { ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions';
import type { LlmRoleConfig } from '../../shared/config/schema.js';
import { loadOnce } from '../../shared/load-once.js';
import {
  callFailure,
  sdkCallTarget,
  sdkRequest,
  sdkClientOptions,
  resolveApiKey,
  NO_USAGE,
  tokenCount,
  type ChatCompletion,
  type ChatProvider,
  type ChatRequest,
} from './chat.js';
import type { ModelRole } from '../../shared/config/roles.js';
import { warnOnce } from './provider-warnings.js';
import type { TokenLogprob } from './score-logprobs.js';
import { replyJsonSchema } from './structured.js';
import { estimateUsage } from './token-estimate.js';

// The SDK is ~150 modules: it loads on a provider's first call, not with every CLI command.
const loadSdk = loadOnce(() => import('openai'));

/**
 * OpenAI and every server that speaks its chat-completions protocol (Ollama, vLLM, LM Studio)
 * through the official SDK. Structured output: `response_format: json_schema` (strict, with the
 * schema rewritten for strict mode) in `native` mode, `json_object` in `json` mode, none in
 * `prompt` mode (the prompt carries the schema then). Rate limits (429), server errors (5xx)
 * and per-attempt timeouts are retried by the SDK with exponential backoff, honouring
 * Retry-After (a 429 under a rateLimit is not: it pauses the shared quota, quota.ts);
 * `timeoutMs` bounds the whole call, retries included.
 */
export function createOpenAiProvider(
  role: ModelRole,
  config: LlmRoleConfig,
  env: NodeJS.ProcessEnv = process.env,
): ChatProvider {
  const options = sdkClientOptions(config, resolveApiKey(role, config, env));
  const client = loadOnce(async () => new (await loadSdk()).default(options));
  const where = sdkCallTarget(role, 'openai', config, 'OPENAI_API_KEY');

  return {
    label: where.label,
    async ready() {
      await client();
    },
    async complete(request: ChatRequest): Promise<ChatCompletion> {
      const target = { ...where, timeoutMs: request.timeoutMs };
      const sdk = await loadSdk();
      const openai = await client();
      const completion: OpenAI.Chat.Completions.ChatCompletion = await sdkRequest(
        target,
        request,
        sdk,
        (options) => openai.chat.completions.create(chatParams(config, request), options),
      );
      const isCompletion = Array.isArray(completion.choices);
      const choice = isCompletion ? completion.choices[0] : undefined;
      const message = choice?.message;
      const raw = request.tools
        ? toolCallText(message)
        : typeof message?.content === 'string'
          ? message.content
          : '';
      // Billed even when the reply is of no use: a failure carries it for the meter. A server
      // that reports none is counted by estimate of what was sent (schema and tools included)
      // and received, not as free; a body that is no completion at all (a proxy's page) was no
      // model call.
      const usage = completion.usage
        ? {
            inputTokens: tokenCount(completion.usage.prompt_tokens),
            outputTokens: tokenCount(completion.usage.completion_tokens),
          }
        : isCompletion
          ? await estimateUsage(request, config, raw)
          : NO_USAGE;
      if (completion.usage) warnIfPromptCut(role, config, request, usage.inputTokens);
      if (!choice) {
        // Some gateways answer 200 with {"error": {...}} instead of an HTTP error.
        const { error } = completion as { error?: { message?: unknown } };
        throw callFailure('reply', target, {
          message:
            typeof error?.message === 'string'
              ? `the server answered with an error: ${error.message}`
              : typeof completion === 'string'
                ? `the response is not JSON: ${(completion as string).slice(0, 200)}`
                : 'the response has no choices (not a chat completion)',
          usage,
        });
      }
      if (message?.refusal) {
        throw callFailure('reply', target, {
          message: `the model refused: ${message.refusal}`,
          usage,
        });
      }
      if (choice.finish_reason === 'length') {
        // A cut-off JSON reply cannot be repaired by asking again with the same limit.
        throw callFailure('reply', target, {
          message: `the reply was cut off at the output token limit (${config.maxOutputTokens ?? "the server's default"})`,
          usage,
          truncated: true,
        });
      }
      if (raw.trim() === '') {
        throw callFailure('reply', target, {
          message: `empty reply (finish_reason ${choice.finish_reason ?? 'unknown'})`,
          usage,
        });
      }
      const tokenLogprobs = request.topLogprobs ? logprobsOf(choice) : undefined;
      return {
        raw,
        usage,
        ...(tokenLogprobs ? { tokenLogprobs } : {}),
        ...(typeof completion.model === 'string' ? { responseModel: completion.model } : {}),
        ...(choice.finish_reason ? { finishReasons: [choice.finish_reason] } : {}),
      };
    },
  };
}

/** The reply's token log-probabilities, or undefined when the server returned none. */
function logprobsOf(
  choice: OpenAI.Chat.Completions.ChatCompletion.Choice,
): TokenLogprob[] | undefined {
  const content = choice.logprobs?.content;
  if (!Array.isArray(content) || content.length === 0) return undefined;
  return content.map((t) => ({
    token: t.token,
    logprob: t.logprob,
    top: (t.top_logprobs ?? []).map((a) => ({ token: a.token, logprob: a.logprob })),
  }));
}

/** Below this estimate no server's context is so small that a cut would be likely. */
const CUT_MIN_ESTIMATE = 1024;

/**
 * Warns (once per role and server) when the server counted fewer than half the prompt tokens
 * estimated at four characters a token (which rather undercounts: code and non-English text
 * take more tokens; cheap enough for every call, unlike the tokenizer): it cut the prompt at
 * its context length. Ollama does so silently on its
 * OpenAI-compatible endpoint, which takes no num_ctx, and reports the tokens it kept.
 */
function warnIfPromptCut(
  role: ModelRole,
  config: LlmRoleConfig,
  request: ChatRequest,
  counted: number,
): void {
  const { system, user, followUp } = request;
  const sent =
    system.length +
    user.length +
    (followUp ? followUp.reply.length + followUp.correction.length : 0);
  const estimate = Math.ceil(sent / 4);
  if (estimate < CUT_MIN_ESTIMATE || counted === 0 || counted * 2 >= estimate) return;
  warnOnce(
    `prompt-cut:${role}:${config.baseUrl ?? ''}:${config.model}`,
    { role, model: config.model, baseUrl: config.baseUrl, promptTokens: counted, estimate },
    `The ${role} model openai:${config.model} counted ${counted} prompt tokens for a prompt of about ${estimate}: ` +
      "the server probably cut it at its context length, dropping part of the instructions. Raise the server's context " +
      '(Ollama: OLLAMA_CONTEXT_LENGTH, or num_ctx in a Modelfile; vLLM: --max-model-len); see docs/providers.md',
  );
}

function chatParams(
  config: LlmRoleConfig,
  request: ChatRequest,
): ChatCompletionCreateParamsNonStreaming {
  const messages: ChatCompletionCreateParamsNonStreaming['messages'] = [
    { role: 'system', content: request.system },
    { role: 'user', content: request.user },
  ];
  if (request.followUp) {
    messages.push(
      { role: 'assistant', content: request.followUp.reply },
      { role: 'user', content: request.followUp.correction },
    );
  }
  return {
    model: config.model,
    messages,
    ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
    ...(config.maxOutputTokens ? { max_completion_tokens: config.maxOutputTokens } : {}),
    ...(request.topLogprobs ? { logprobs: true, top_logprobs: request.topLogprobs } : {}),
    ...(request.tools ? toolChoice(request.tools) : responseFormat(config, request)),
  };
}

/** Native function calling: one call of one of `tools`, which the model must make. */
function toolChoice(
  tools: NonNullable<ChatRequest['tools']>,
): Pick<ChatCompletionCreateParamsNonStreaming, 'tools' | 'tool_choice' | 'parallel_tool_calls'> {
  return {
    tools: tools.map((tool) => ({
      type: 'function',
      function: { name: tool.name, description: tool.description, parameters: tool.inputSchema },
    })),
    tool_choice: 'required',
    parallel_tool_calls: false,
  };
}

/**
 * The model's first function call as a ToolCallReply in JSON. Arguments that are not JSON are
 * passed on as a string, and no call at all as the message text: validation then fails, and
 * the repair turn tells the model why.
 */
function toolCallText(message: OpenAI.Chat.Completions.ChatCompletionMessage | undefined): string {
  const call = message?.tool_calls?.find((c) => c.type === 'function');
  if (!call || call.type !== 'function') {
    return typeof message?.content === 'string' ? message.content : '';
  }
  let input: unknown;
  try {
    input = JSON.parse(call.function.arguments || '{}');
  } catch {
    input = call.function.arguments;
  }
  return JSON.stringify({ tool: call.function.name, input });
}

function responseFormat(
  config: LlmRoleConfig,
  request: ChatRequest,
): Pick<ChatCompletionCreateParamsNonStreaming, 'response_format'> {
  switch (request.structuredOutput ?? config.structuredOutput) {
    case 'native':
      return {
        response_format: {
          type: 'json_schema',
          json_schema: {
            name: request.schemaName,
            schema: replyJsonSchema(request.schema, { strict: true }),
            strict: true,
          },
        },
      };
    case 'json':
      return { response_format: { type: 'json_object' } };
    case 'prompt':
      return {};
  }
}
