import type { LlmRoleConfig } from '../../shared/config/schema.js';
import type { TokenUsage } from '../../shared/domain/task.js';
import { loadOnce } from '../../shared/load-once.js';
import type { ChatRequest } from './chat.js';
import { replyJsonSchema } from './structured.js';

/**
 * Token counts of what a call sends and receives, for a server that reports no usage and for a
 * budget's reservation before the call. Counted with o200k_base (gpt-tokenizer: pure JS, no
 * dependencies, the encoding of current OpenAI models), not characters ÷ 4, which undercounts
 * Japanese and Chinese text by half. Claude's tokenizer is not published: o200k_base stands in.
 */

// ~200 ms and 2 MB of ranks: loaded on the first estimate, not with every CLI command.
const loadTokenizer = loadOnce(() => import('gpt-tokenizer/encoding/o200k_base'));

/** What the chat formats add around each message (role markers, separators). */
const TOKENS_PER_MESSAGE = 4;

export async function countTokens(text: string): Promise<number> {
  if (text === '') return 0;
  const { countTokens: count } = await loadTokenizer();
  return count(text);
}

/**
 * The texts a request sends that the model reads: system prompt, messages, and the JSON Schema
 * or tool definitions both providers send with them (the reply's schema in `native` mode).
 */
export function sentTexts(
  request: Pick<ChatRequest, 'system' | 'user' | 'followUp' | 'schema' | 'tools'>,
  config: Pick<LlmRoleConfig, 'structuredOutput'>,
): string[] {
  const texts = [request.system, request.user];
  if (request.followUp) texts.push(request.followUp.reply, request.followUp.correction);
  if (request.tools) {
    texts.push(
      JSON.stringify(
        request.tools.map((t) => ({
          name: t.name,
          description: t.description,
          parameters: t.inputSchema,
        })),
      ),
    );
  } else if (config.structuredOutput === 'native') {
    texts.push(JSON.stringify(replyJsonSchema(request.schema, { strict: false })));
  }
  return texts;
}

/** Input tokens of a request as sent (texts, schema, tools, and each message's framing). */
export async function estimateInputTokens(
  request: Pick<ChatRequest, 'system' | 'user' | 'followUp' | 'schema' | 'tools'>,
  config: Pick<LlmRoleConfig, 'structuredOutput'>,
): Promise<number> {
  const texts = sentTexts(request, config);
  let tokens = 0;
  for (const text of texts) tokens += (await countTokens(text)) + TOKENS_PER_MESSAGE;
  return tokens;
}

/** The usage of a call whose server reported none: what it sent and what it answered. */
export async function estimateUsage(
  request: Pick<ChatRequest, 'system' | 'user' | 'followUp' | 'schema' | 'tools'>,
  config: Pick<LlmRoleConfig, 'structuredOutput'>,
  reply: string,
): Promise<TokenUsage> {
  return {
    inputTokens: await estimateInputTokens(request, config),
    outputTokens: await countTokens(reply),
  };
}
