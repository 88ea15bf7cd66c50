import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { PlanAnswer, QuestionAnswer, WaitId } from '../../../shared/domain/human-wait.js';
import { TaskId } from '../../../shared/domain/task.js';
import { OrqError } from '../../../shared/errors.js';
import { answerFor, type AnswerRole } from '../answer-policy.js';
import { ApiError } from '../errors.js';
import { SessionParams } from '../schemas.js';
import { UI_PATH } from '../ui/html.js';
import { typed, type RouteContext } from './context.js';

const waitId = WaitId.optional().describe(
  'The wait the person looked at (session.wait.id): refused with 409 WAIT_ENDED if the session waits on another now.',
);

const [approveAnswer, rejectAnswer, editAnswer] = PlanAnswer.options;
const stepTask = TaskId.optional().describe(
  'Answer the step approval of this task (session.stepWaits[].taskId) rather than the plan; or name the wait (waitId step-…).',
);
const ApproveBody = approveAnswer.omit({ action: true }).extend({ waitId, taskId: stepTask });
const RejectBody = rejectAnswer.omit({ action: true }).extend({ waitId, taskId: stepTask });
const EditBody = editAnswer.omit({ action: true }).extend({ waitId });
const QuestionBody = QuestionAnswer.omit({ action: true }).extend({
  waitId,
  taskId: TaskId.optional().describe(
    'The task whose question this answers (session.questions[].taskId); needed when several ask.',
  ),
});

export const AnswerReply = z.object({
  sessionId: z.string(),
  waitId: WaitId,
  requestId: z.string(),
  /** The coordinator applied it before the reply (200); false: queued, applied when it runs (202). */
  applied: z.boolean(),
});

const ACTIONS = {
  approve: {
    body: ApproveBody.nullish(),
    summary:
      'Approve the plan a session AWAITING_APPROVAL waits on (its tasks start), or a step that waits (session.stepWaits): it runs',
  },
  reject: {
    body: RejectBody,
    summary:
      'Reject the plan a session waits on, with feedback (the Planner replans, one refinement attempt), or a step that waits: its executor hears the feedback as the reason',
  },
  edit: {
    body: EditBody,
    summary:
      'Run an edited plan instead of the one waiting, checked as a replan is (structure, required terms)',
  },
  answer: {
    body: QuestionBody,
    summary:
      "Answer a question (session.questions): a blocked task's runs it again, a running agent's (ask_human) goes on, with the answer in its context",
  },
} as const;

/**
 * A person's answers to a session waiting for them (issue 48): `POST /sessions/:id/approve`,
 * `/reject`, `/edit` and `/answer` (a question's), and the session view's same routes under /ui (hidden from the API
 * reference, refused in read-only mode). Both ask answer-policy.ts whether the caller may.
 */
export function registerApprovalRoutes(
  app: FastifyInstance,
  ctx: RouteContext,
  options: { readOnly: boolean; mayAnswer: readonly AnswerRole[] },
): void {
  const api = typed(app);
  for (const [action, spec] of Object.entries(ACTIONS) as [
    keyof typeof ACTIONS,
    (typeof ACTIONS)[keyof typeof ACTIONS],
  ][]) {
    for (const base of ['/sessions', `${UI_PATH}/sessions`]) {
      const ui = base !== '/sessions';
      api.post(
        `${base}/:id/${action}`,
        {
          schema: {
            hide: ui,
            tags: ['sessions'],
            summary: spec.summary,
            params: SessionParams,
            body: spec.body as z.ZodType,
            response: {
              200: AnswerReply,
              202: AnswerReply,
              400: ApiError,
              403: ApiError,
              404: ApiError,
              409: ApiError,
              500: ApiError,
              503: ApiError,
            },
          },
        },
        async (request, reply) => {
          if (ui && options.readOnly) {
            throw new OrqError('FORBIDDEN', 'this server shows sessions read-only: no actions', {
              hint: 'Use the API with a token that may answer, or start the dashboard without --read-only-board.',
            });
          }
          const {
            waitId: seen,
            taskId,
            ...fields
          } = (request.body ?? {}) as Record<string, unknown> & {
            waitId?: string;
            taskId?: string;
          };
          const outcome = await answerFor(
            ctx.client,
            request,
            options.mayAnswer,
            request.params.id,
            { action, ...fields } as never,
            { waitId: seen, taskId },
          );
          ctx.metrics.sessionActions.inc({ action });
          return reply
            .code(outcome.applied ? 200 : 202)
            .send({ sessionId: request.params.id, ...outcome });
        },
      );
    }
  }
}
