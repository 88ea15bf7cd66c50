import { MODEL_ROLES, roleConfig } from './roles.js';
import type { ApprovalConfig, SessionConfig } from './schema.js';

/**
 * What a caller who is not the operator (the HTTP API) may choose among, beyond which settings
 * it may set at all (override-policy.ts): the values (issue 41). A caller may pick only a
 * provider and model the operator's own config uses for some role, or lists in http.models, so
 * it cannot point the pods at a provider whose key they hold for another purpose; and it may
 * only lower the budget, never raise it or lift it.
 */

export interface CallerLimitIssue {
  /** The setting, as the request names it: `config.llm.worker`, `config.budget.maxUsd`. */
  path: string;
  message: string;
}

/** `provider/model` as http.models lists it. */
export const modelChoice = (provider: string, model: string): string => `${provider}/${model}`;

/** Whether `provider/model` is offered: used by the operator's config, or listed (`p/*` too). */
function offered(choice: string, operatorChoices: ReadonlySet<string>, listed: readonly string[]) {
  const provider = choice.slice(0, choice.indexOf('/'));
  return operatorChoices.has(choice) || listed.includes(choice) || listed.includes(`${provider}/*`);
}

const BUDGET_LIMITS = ['maxTokens', 'maxUsd'] as const;

/** The request's choices the operator does not offer; empty when it keeps within them. */
export function callerLimitIssues(
  operator: SessionConfig,
  chosen: SessionConfig,
  listedModels: readonly string[],
): CallerLimitIssue[] {
  const issues: CallerLimitIssue[] = [];
  const operatorChoices = new Set(
    MODEL_ROLES.map((role) => {
      const config = roleConfig(operator.llm, role);
      return modelChoice(config.provider, config.model);
    }),
  );
  for (const role of MODEL_ROLES) {
    const config = roleConfig(chosen.llm, role);
    const choice = modelChoice(config.provider, config.model);
    if (offered(choice, operatorChoices, listedModels)) continue;
    issues.push({
      path: `config.llm.${role}`,
      message: `the ${role} would call ${choice}, which this server does not offer (offered: ${[...new Set([...operatorChoices, ...listedModels])].join(', ')})`,
    });
  }
  for (const limit of BUDGET_LIMITS) {
    const ceiling = operator.budget[limit];
    const asked = chosen.budget[limit];
    if (ceiling === undefined || (asked !== undefined && asked <= ceiling)) continue;
    issues.push({
      path: `config.budget.${limit}`,
      message: `budget.${limit} may only be lowered: ${asked ?? 'no limit'} is over this server's ${ceiling}`,
    });
  }
  // A submitter may ask a person to approve its plan, never waive an approval the operator asks.
  if (operator.approval.plan === 'required' && chosen.approval.plan !== 'required') {
    issues.push({
      path: 'config.approval.plan',
      message:
        "this server requires a person's approval of every plan: approval.plan stays required",
    });
  }
  // Step approvals alike: a submitter may add rules, never drop one of the operator's.
  const asked = new Set(chosen.approval.steps.map((rule) => JSON.stringify(rule)));
  const dropped = operator.approval.steps.filter((rule) => !asked.has(JSON.stringify(rule)));
  if (dropped.length > 0) {
    issues.push({
      path: 'config.approval.steps',
      message: `this server requires a person's approval of these steps, which approval.steps must keep: ${dropped.map((rule) => JSON.stringify(rule)).join(', ')}`,
    });
  }
  // Nor end it sooner by approving on a timeout of its own; nor a step the operator's rules name.
  const soonerPlan = approvesSooner(
    'plan',
    approvingAfter(chosen.approval.onTimeout, chosen.approval.timeoutSeconds),
    approvingAfter(operator.approval.onTimeout, operator.approval.timeoutSeconds),
  );
  if (operator.approval.plan === 'required' && soonerPlan) {
    issues.push({ path: 'config.approval.onTimeout', message: soonerPlan });
  }
  const soonerStep = approvesSooner(
    'step',
    approvingAfter(chosen.approval.onStepTimeout, chosen.approval.stepTimeoutSeconds),
    approvingAfter(operator.approval.onStepTimeout, operator.approval.stepTimeoutSeconds),
  );
  if (operator.approval.steps.length > 0 && soonerStep) {
    issues.push({ path: 'config.approval.onStepTimeout', message: soonerStep });
  }
  return issues;
}

/** After how many seconds a wait approves on its own; undefined when it never does. */
function approvingAfter(
  onTimeout: ApprovalConfig['onTimeout'],
  seconds: number | undefined,
): number | undefined {
  return onTimeout === 'approve' ? seconds : undefined;
}

/**
 * Why a caller's wait would approve on its own sooner than the operator's config lets it (never
 * when the operator's does not approve on a timeout); undefined when it keeps within it.
 */
function approvesSooner(
  what: 'plan' | 'step',
  chosen: number | undefined,
  operator: number | undefined,
): string | undefined {
  if (chosen === undefined || (operator !== undefined && chosen >= operator)) return undefined;
  return `a ${what} may approve itself on a timeout only as this server's config says (${operator !== undefined ? `after ${operator} s` : 'never'})`;
}
