import { z } from 'zod';
import type { ToolSpec } from './types.js';

/**
 * ask_human (issue 48): the agent asks a person and waits. It is no Toolbox tool: the loop
 * records the question, the run stops (its job ends, holding nothing), and the person's answer
 * resumes it with the answer as this call's result.
 */
export const ASK_HUMAN = 'ask_human';

export const AskHumanInput = z.object({
  question: z.string().trim().min(1, 'ask a question').max(20_000),
});

const { $schema: _ignored, ...inputSchema } = z.toJSONSchema(AskHumanInput, { io: 'input' });

export const ASK_HUMAN_SPEC: ToolSpec = {
  name: ASK_HUMAN,
  description:
    "Ask a person a question only they can answer (a choice, a name, where a credential is), when you cannot go on without it. The run waits for the answer, which comes back as this call's result. Ask in a few words; do not ask what the workspace or the task tells you.",
  inputSchema,
};
