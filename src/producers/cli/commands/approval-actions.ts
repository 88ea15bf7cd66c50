import { readFileSync } from 'node:fs';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { OrqError } from '../../../shared/errors.js';
import type { AnswerOutcome, OrqClient } from '../../client.js';
import { printJson, withSessions } from '../common.js';
import { privateRedisDir } from '../redis-for-cli.js';

export interface PlanCliOptions {
  config?: string;
  json?: boolean;
}

export interface AnswerCliOptions {
  config?: string;
  wait?: string;
  comment?: string;
  /** A step approval's task (approve, reject) or a question's (answer). */
  task?: string;
}

export type QuestionCliOptions = AnswerCliOptions;

export interface EditCliOptions extends AnswerCliOptions {
  allowTermLoss?: boolean;
}

/** Who answers, for the history: the CLI holds Redis credentials, so it is the operator. */
const BY = 'cli';

/** `orq plan`: the waiting plan as YAML a person edits and gives back to `orq edit`. */
export function printPlan(sessionId: string, options: PlanCliOptions): Promise<void> {
  return withSessions(options, async (client) => {
    const { session } = await client.get(sessionId);
    if (!session.wait) {
      throw new OrqError(
        'INVALID_STATE',
        `session ${sessionId} is ${session.state}: no plan waits for approval`,
        {
          hint: `orq status ${sessionId} shows where it is.`,
          details: { sessionId, state: session.state },
        },
      );
    }
    if (options.json) {
      printJson(session.wait);
      return;
    }
    const { wait } = session;
    const header = [
      `# Plan ${wait.id} of session ${sessionId}: score ${wait.score ?? 'n/a'}`,
      ...wait.issues.map((i) => `# issue: ${i}`),
      ...wait.suggestions.map((i) => `# suggestion: ${i}`),
      `# Edit it, then: orq edit ${sessionId} <this file> --wait ${wait.id}`,
    ];
    process.stdout.write(`${header.join('\n')}\n${stringifyYaml(wait.plan)}`);
  });
}

/** Sends one answer, and says what became of it. */
function answerWith(
  sessionId: string,
  options: AnswerCliOptions,
  send: (
    client: OrqClient,
    common: { waitId?: string; taskId?: string; by: string },
  ) => Promise<AnswerOutcome>,
  said: string,
): Promise<void> {
  return withSessions(options, async (client, config) => {
    const outcome = await send(client, {
      by: BY,
      ...(options.wait ? { waitId: options.wait } : {}),
      ...(options.task ? { taskId: options.task } : {}),
    });
    process.stdout.write(`${said} ${outcome.waitId} of ${sessionId}\n`);
    if (!outcome.applied && (await client.consumers()).coordinator === 0) {
      process.stderr.write(
        config.redis.url
          ? `orq: no process runs the coordinator role on this Redis under the prefix "${config.redis.prefix}": the answer waits until one does.\n`
          : `orq: no coordinator runs on the private Redis in ${privateRedisDir()}: \`orq watch ${sessionId} --run\` applies the answer here.\n`,
      );
    }
  });
}

export function approve(sessionId: string, options: AnswerCliOptions): Promise<void> {
  return answerWith(
    sessionId,
    options,
    (client, common) =>
      client.approve(sessionId, {
        ...common,
        ...(options.comment ? { comment: options.comment } : {}),
      }),
    'approved',
  );
}

export function reject(
  sessionId: string,
  options: AnswerCliOptions & { feedback: string },
): Promise<void> {
  return answerWith(
    sessionId,
    options,
    (client, common) => client.reject(sessionId, options.feedback, common),
    'rejected',
  );
}

export function answerQuestion(
  sessionId: string,
  text: string,
  options: QuestionCliOptions,
): Promise<void> {
  return answerWith(
    sessionId,
    options,
    (client, common) =>
      client.answerQuestion(sessionId, text, {
        ...common,
        ...(options.task ? { taskId: options.task } : {}),
      }),
    'answered',
  );
}

export function edit(sessionId: string, planFile: string, options: EditCliOptions): Promise<void> {
  const plan = readPlanFile(planFile);
  return answerWith(
    sessionId,
    options,
    (client, common) =>
      client.editPlan(sessionId, plan as never, {
        ...common,
        ...(options.allowTermLoss ? { allowTermLoss: true } : {}),
        ...(options.comment ? { comment: options.comment } : {}),
      }),
    'edited',
  );
}

/** A plan file (YAML or JSON, `-` for stdin); its shape is checked by the client. */
function readPlanFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path === '-' ? 0 : path, 'utf8');
  } catch (error) {
    throw new OrqError(
      'VALIDATION_FAILED',
      `cannot read the plan file ${path}: ${(error as Error).message}`,
      {
        hint: 'Give the path of a YAML or JSON plan (orq plan <id> prints the waiting one), or - for stdin.',
        cause: error,
      },
    );
  }
  try {
    return parseYaml(text) as unknown;
  } catch (error) {
    throw new OrqError(
      'VALIDATION_FAILED',
      `the plan file ${path} is not YAML or JSON: ${(error as Error).message}`,
      {
        hint: 'orq plan <id> prints the waiting plan in the shape to give back.',
        cause: error,
      },
    );
  }
}
