import type { FastifySchemaCompiler } from 'fastify';
import type { z } from 'zod';
import {
  describeZodIssues,
  parseForPeople,
  ValidationError,
  type FieldIssue,
} from '../../shared/errors.js';

const GOT_NAN = ', got NaN';

/**
 * A query's numbers are coerced (`?limit=abc` becomes NaN before the check): the refusal says
 * what was sent, `got "abc"`, as the CLI's and the library's do.
 */
function asSent(issue: FieldIssue, data: unknown): FieldIssue {
  if (!issue.message.endsWith(GOT_NAN) || typeof data !== 'object' || data === null) return issue;
  const sent = (data as Record<string, unknown>)[issue.path];
  if (typeof sent !== 'string') return issue;
  return {
    ...issue,
    message: `${issue.message.slice(0, -GOT_NAN.length)}, got ${JSON.stringify(sent)}`,
  };
}

/**
 * The routes' zod schemas as Fastify validators, with orq's wording of the issues (the same as
 * the library's and the CLI's): a refusal is a ValidationError naming the part of the request
 * (`Invalid body: instruction: at most 100,000 characters, got 100,001 characters`). Fastify
 * keeps an Error a validator returns as the error its handler gets.
 */
export const validatorCompiler: FastifySchemaCompiler<z.ZodType> =
  ({ schema, httpPart }) =>
  (data) => {
    const result = parseForPeople(schema, data);
    if (result.success) return { value: result.data };
    const issues = describeZodIssues(result.error).map((issue) => asSent(issue, data));
    return { error: new ValidationError(httpPart ?? 'request', issues) };
  };
