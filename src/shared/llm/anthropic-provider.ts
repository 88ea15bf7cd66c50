import type Anthropic from '@anthropic-ai/sdk';
import type { LlmRoleConfig } from '../config/schema.js';
import { loadOnce } from '../load-once.js';
import {
  callFailure,
  sdkCallTarget,
  sdkRequest,
  sdkClientOptions,
  resolveApiKey,
  tokenCount,
  type ChatCompletion,
  type ChatProvider,
  type ChatRequest,
  type ModelRole,
} from './chat.js';
import { replyJsonSchema } from './structured.js';

// The SDK is ~250 modules: it loads on a provider's first call, not with every CLI command.
const loadSdk = loadOnce(() => import('@anthropic-ai/sdk'));

/** Anthropic's messages API requires max_tokens; this is used when maxOutputTokens is unset. */
export const DEFAULT_ANTHROPIC_MAX_TOKENS = 8192;

/**
 * Anthropic's messages API through the official SDK. Structured output in `native` mode is a
 * single tool whose input_schema is the reply's JSON Schema, forced with tool_choice, so the
 * reply is the tool's input; in `json` and `prompt` modes the model writes the JSON as text
 * (the prompt carries the schema). Retries (429, 529 overloaded, 5xx) and backoff are the SDK's;
 * `timeoutMs` bounds the whole call, retries included.
 */
export function createAnthropicProvider(
  role: ModelRole,
  config: LlmRoleConfig,
  env: NodeJS.ProcessEnv = process.env,
): ChatProvider {
  const options = sdkClientOptions(config, resolveApiKey(role, config, env));
  const client = loadOnce(
    async () => new (await loadSdk()).default({ ...options, openTelemetry: false }),
  );
  const where = sdkCallTarget(role, 'anthropic', config, 'ANTHROPIC_API_KEY');

  return {
    label: where.label,
    async complete(request: ChatRequest): Promise<ChatCompletion> {
      const target = { ...where, timeoutMs: request.timeoutMs };
      const sdk = await loadSdk();
      const anthropic = await client();
      const message: Anthropic.Messages.Message = await sdkRequest(
        target,
        request,
        sdk,
        (options) => anthropic.messages.create(messageParams(config, request), options),
      );
      const billed = message.usage;
      // Billed even when the reply is of no use: a failure carries it for the meter.
      const usage = {
        // input_tokens excludes cached input; all of it was sent, so all of it counts.
        inputTokens:
          tokenCount(billed?.input_tokens) +
          tokenCount(billed?.cache_creation_input_tokens) +
          tokenCount(billed?.cache_read_input_tokens),
        outputTokens: tokenCount(billed?.output_tokens),
      };
      if (!Array.isArray(message.content)) {
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
      const raw = request.tools ? toolCallText(message) : replyText(message, request.schemaName);
      if (raw.trim() === '') {
        throw callFailure('reply', target, {
          message: `no tool input and no text (stop_reason ${message.stop_reason ?? 'unknown'})`,
          usage,
        });
      }
      return { raw, usage };
    },
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
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
    };
  }
  if (config.structuredOutput !== 'native') return params;
  const schema = replyJsonSchema(request.schema, { strict: false });
  return {
    ...params,
    tools: [
      {
        name: request.schemaName,
        description: `Submit your reply as a ${request.schemaName} object.`,
        input_schema: { ...schema, type: 'object' },
      },
    ],
    tool_choice: { type: 'tool', name: request.schemaName, disable_parallel_tool_use: true },
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

/** The forced tool's input as JSON; else the text blocks (a server that ignored the tool). */
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
