import type Anthropic from '@anthropic-ai/sdk';
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
import { DEFAULT_ANTHROPIC_MAX_TOKENS, type ModelRole } from '../../shared/config/roles.js';
import { withSdkWarnings } from './provider-warnings.js';
import type { TokenUsage } from '../../shared/domain/task.js';
import { anthropicJsonSchema } from './structured.js';
import { estimateUsage } from './token-estimate.js';

// The SDK is ~250 modules: it loads on a provider's first call, not with every CLI command.
const loadSdk = loadOnce(() => import('@anthropic-ai/sdk'));

/**
 * Anthropic's messages API through the official SDK. Structured output in `native` mode is
 * JSON outputs (`output_config.format` with the reply's JSON Schema), answered as text; in
 * `json` and `prompt` modes the model writes the JSON as text too (the prompt carries the
 * schema). No tool is ever forced: current Claude models refuse it. Retries (429, 529 overloaded, 5xx) and backoff are the SDK's,
 * but for a 429 under a rateLimit, which pauses the shared quota (quota.ts); `timeoutMs`
 * bounds the whole call, retries included.
 */
export function createAnthropicProvider(
  role: ModelRole,
  config: LlmRoleConfig,
  env: NodeJS.ProcessEnv = process.env,
): ChatProvider {
  const options = sdkClientOptions(config, resolveApiKey(role, config, env));
  const client = loadOnce(
    async () =>
      new (await loadSdk()).default({
        ...options,
        // The key in x-api-key, as Anthropic's API and gateways in front of it expect; this SDK
        // would send it as `Authorization: Bearer`, which they refuse.
        defaultHeaders: { 'x-api-key': options.apiKey, authorization: null },
        openTelemetry: false,
      }),
  );
  const where = sdkCallTarget(role, 'anthropic', config, 'ANTHROPIC_API_KEY');

  return {
    label: where.label,
    async ready() {
      await client();
    },
    async complete(request: ChatRequest): Promise<ChatCompletion> {
      const target = { ...where, timeoutMs: request.timeoutMs };
      const sdk = await loadSdk();
      const anthropic = await client();
      const message: Anthropic.Messages.Message = await sdkRequest(
        target,
        request,
        sdk,
        (options) =>
          withSdkWarnings('anthropic', { role, model: config.model }, () =>
            anthropic.messages.create(messageParams(config, request), options),
          ),
      );
      const isMessage = Array.isArray(message.content);
      const raw = !isMessage
        ? ''
        : request.tools
          ? toolCallText(message)
          : replyText(message, request.schemaName);
      // Billed even when the reply is of no use: a failure carries it for the meter.
      const usage = await billedUsage(message, isMessage, () =>
        estimateUsage(request, config, raw),
      );
      if (!isMessage) {
        throw callFailure('reply', target, {
          message:
            typeof message === 'string'
              ? `the response is not JSON: ${(message as string).slice(0, 200)}`
              : 'the response has no content (not a Messages API reply)',
          usage,
        });
      }
      if (message.stop_reason === 'max_tokens') {
        // A cut-off JSON reply cannot be repaired by asking again with the same limit.
        throw callFailure('reply', target, {
          message: `the reply was cut off at max_tokens ${config.maxOutputTokens ?? DEFAULT_ANTHROPIC_MAX_TOKENS}`,
          usage,
          truncated: true,
        });
      }
      if (raw.trim() === '') {
        throw callFailure('reply', target, {
          message: `no tool input and no text (stop_reason ${message.stop_reason ?? 'unknown'})`,
          usage,
        });
      }
      return {
        raw,
        usage,
        ...(typeof message.model === 'string' ? { responseModel: message.model } : {}),
        ...(message.stop_reason ? { finishReasons: [message.stop_reason] } : {}),
      };
    },
  };
}

/**
 * What the message was billed: input_tokens excludes cached input, but all of it was sent, so
 * all of it counts. A server that leaves usage or a field of it out (a proxy, a local server)
 * is counted by estimate of what was sent and received, not as free; a body that is no message
 * at all (a proxy's page) was no model call.
 */
async function billedUsage(
  message: Anthropic.Messages.Message,
  isMessage: boolean,
  estimate: () => Promise<TokenUsage>,
): Promise<TokenUsage> {
  const billed = message.usage as Partial<Anthropic.Messages.Usage> | undefined;
  const reported = (value: unknown) => typeof value === 'number' && Number.isFinite(value);
  const hasInput = reported(billed?.input_tokens);
  const hasOutput = reported(billed?.output_tokens);
  const estimated = isMessage && !(hasInput && hasOutput) ? await estimate() : NO_USAGE;
  return {
    inputTokens: hasInput
      ? tokenCount(billed?.input_tokens) +
        tokenCount(billed?.cache_creation_input_tokens) +
        tokenCount(billed?.cache_read_input_tokens)
      : estimated.inputTokens,
    outputTokens: hasOutput ? tokenCount(billed?.output_tokens) : estimated.outputTokens,
  };
}

function messageParams(
  config: LlmRoleConfig,
  request: ChatRequest,
): Anthropic.Messages.MessageCreateParamsNonStreaming {
  const messages: Anthropic.Messages.MessageParam[] = [{ role: 'user', content: request.user }];
  if (request.followUp) {
    messages.push(
      { role: 'assistant', content: request.followUp.reply },
      { role: 'user', content: request.followUp.correction },
    );
  }
  const params: Anthropic.Messages.MessageCreateParamsNonStreaming = {
    model: config.model,
    max_tokens: config.maxOutputTokens ?? DEFAULT_ANTHROPIC_MAX_TOKENS,
    system: request.system,
    messages,
    // No temperature: the current Messages API has deprecated it (llm.*.temperature is for
    // OpenAI-compatible servers).
  };
  if (request.tools) {
    return {
      ...params,
      tools: request.tools.map((tool) => ({
        name: tool.name,
        description: tool.description,
        input_schema: { ...tool.inputSchema, type: 'object' as const },
      })),
      // auto, not any: current Claude models (Opus 5.5, Sonnet 5.5) answer 400 to a forced
      // tool_choice. The prompt asks for one tool call per step; a reply with none gets a
      // repair turn (structured.ts).
      tool_choice: { type: 'auto', disable_parallel_tool_use: true },
    };
  }
  if ((request.structuredOutput ?? config.structuredOutput) !== 'native') return params;
  // JSON outputs (constrained decoding, Claude 4.5 and later), not a forced tool, which
  // current models refuse. A server that ignores output_config answers prose: the role then
  // falls back to prompt mode (llm-models.ts).
  return {
    ...params,
    output_config: {
      format: {
        type: 'json_schema',
        schema: anthropicJsonSchema(request.schema, request.schemaName),
      },
    },
  };
}

/** The model's first tool call as a ToolCallReply in JSON; else its text (validation fails). */
function toolCallText(message: Anthropic.Messages.Message): string {
  const blocks = message.content ?? [];
  const tool = blocks.find(
    (block): block is Anthropic.Messages.ToolUseBlock => block.type === 'tool_use',
  );
  return tool ? JSON.stringify({ tool: tool.name, input: tool.input }) : textOf(blocks);
}

/**
 * The text blocks, or the input of a tool named after the reply (a gateway that turns JSON
 * outputs into a tool call), as JSON.
 */
function replyText(message: Anthropic.Messages.Message, toolName: string): string {
  const blocks = message.content ?? [];
  const tool = blocks.find(
    (block): block is Anthropic.Messages.ToolUseBlock =>
      block.type === 'tool_use' && block.name === toolName,
  );
  return tool ? JSON.stringify(tool.input) : textOf(blocks);
}

/** The text blocks of a reply, joined. */
function textOf(blocks: Anthropic.Messages.ContentBlock[]): string {
  return blocks
    .filter((block): block is Anthropic.Messages.TextBlock => block.type === 'text')
    .map((block) => block.text)
    .join('\n');
}
