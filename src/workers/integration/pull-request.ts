import type { PullRequestConfig } from '../../shared/config/schema.js';
import type { IntegrationOutcome } from '../../shared/domain/integration.js';
import { OrqError } from '../../shared/errors.js';
import { providerKey } from '../../shared/config/provider-keys.js';
import { gitOk } from '../executors/git-worktree.js';

export type OpenedRequest = NonNullable<IntegrationOutcome['pullRequest']>;

export interface PullRequestAsk {
  config: PullRequestConfig;
  repository: string;
  /** The result branch, pushed under the same name. */
  branch: string;
  /** Where it merges into, when the config names none: execution.command.baseBranch. */
  baseBranch?: string;
  title: string;
  body: string;
  signal?: AbortSignal;
}

const DEFAULT_API = { github: 'https://api.github.com', gitlab: 'https://gitlab.com/api/v4' };
const DEFAULT_TOKEN_ENV = { github: 'GITHUB_TOKEN', gitlab: 'GITLAB_TOKEN' };

/**
 * Pushes the result branch and opens its pull request (GitHub) or merge request (GitLab), once:
 * one already open or closed for the branch is returned as it is, and a create the server
 * refuses as a duplicate (two deliveries racing) returns the one the other opened.
 */
export async function openPullRequest(ask: PullRequestAsk): Promise<OpenedRequest> {
  const { config } = ask;
  const tokenEnv = config.tokenEnv ?? DEFAULT_TOKEN_ENV[config.provider];
  const token = providerKey(tokenEnv);
  if (!token) {
    throw new OrqError(
      'CONFIG_INVALID',
      `integration.pullRequest needs a token: neither ${tokenEnv} nor ${tokenEnv}_FILE is set in this pod`,
      {
        hint: `Export ${tokenEnv} (or ${tokenEnv}_FILE) for every worker pod, or name another variable in integration.pullRequest.tokenEnv`,
        details: { tokenEnv },
      },
    );
  }
  // A push of the same commit again changes nothing.
  await gitOk(
    ['push', '--quiet', config.remote, `+refs/heads/${ask.branch}:refs/heads/${ask.branch}`],
    ask.repository,
    ask.signal,
  );
  const api = (config.apiUrl ?? DEFAULT_API[config.provider]).replace(/\/+$/, '');
  const target = config.targetBranch ?? ask.baseBranch ?? 'main';
  const client =
    config.provider === 'github'
      ? github(api, config.project, token)
      : gitlab(api, config.project, token);
  const existing = await client.find(ask.branch, ask.signal);
  if (existing) return existing;
  const created = await client.create(ask, target);
  if (created) return created;
  // Refused as a duplicate: another delivery opened it meanwhile.
  const other = await client.find(ask.branch, ask.signal);
  if (other) return other;
  throw new OrqError(
    'INVALID_STATE',
    `the ${config.provider} API refused the request for ${ask.branch} as a duplicate, yet lists none`,
    {
      details: { project: config.project, branch: ask.branch },
    },
  );
}

interface RequestsApi {
  find(branch: string, signal?: AbortSignal): Promise<OpenedRequest | undefined>;
  /** Undefined when the server refused it as a duplicate. */
  create(ask: PullRequestAsk, target: string): Promise<OpenedRequest | undefined>;
}

async function call(
  url: string,
  init: { method: string; headers: Record<string, string>; body?: unknown; signal?: AbortSignal },
  duplicate: number,
): Promise<unknown> {
  const response = await fetch(url, {
    method: init.method,
    headers: { ...init.headers, 'content-type': 'application/json', 'user-agent': 'orq' },
    ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
    ...(init.signal ? { signal: init.signal } : {}),
  });
  if (response.status === duplicate) return undefined;
  if (!response.ok) {
    const text = (await response.text()).slice(0, 500);
    throw new OrqError(
      'INVALID_STATE',
      `${init.method} ${url} answered ${response.status}: ${text}`,
      {
        hint: 'Check integration.pullRequest (project, apiUrl) and that the token may open requests',
        details: { url, status: response.status },
      },
    );
  }
  return response.json();
}

function github(api: string, project: string, token: string): RequestsApi {
  const headers = { authorization: `Bearer ${token}`, accept: 'application/vnd.github+json' };
  const base = `${api}/repos/${project}/pulls`;
  const owner = project.split('/')[0] ?? project;
  const opened = (pr: { html_url: string; number: number }): OpenedRequest => ({
    provider: 'github',
    url: pr.html_url,
    number: pr.number,
  });
  return {
    async find(branch, signal) {
      const head = encodeURIComponent(`${owner}:${branch}`);
      const list = (await call(
        `${base}?head=${head}&state=all`,
        { method: 'GET', headers, ...(signal ? { signal } : {}) },
        -1,
      )) as {
        html_url: string;
        number: number;
      }[];
      return list[0] ? opened(list[0]) : undefined;
    },
    async create(ask, target) {
      const pr = (await call(
        base,
        {
          method: 'POST',
          headers,
          body: { title: ask.title, head: ask.branch, base: target, body: ask.body },
          ...(ask.signal ? { signal: ask.signal } : {}),
        },
        422,
      )) as { html_url: string; number: number } | undefined;
      return pr && opened(pr);
    },
  };
}

function gitlab(api: string, project: string, token: string): RequestsApi {
  const headers = { 'private-token': token };
  const base = `${api}/projects/${encodeURIComponent(project)}/merge_requests`;
  const opened = (mr: { web_url: string; iid: number }): OpenedRequest => ({
    provider: 'gitlab',
    url: mr.web_url,
    number: mr.iid,
  });
  return {
    async find(branch, signal) {
      const list = (await call(
        `${base}?source_branch=${encodeURIComponent(branch)}`,
        { method: 'GET', headers, ...(signal ? { signal } : {}) },
        -1,
      )) as { web_url: string; iid: number }[];
      return list[0] ? opened(list[0]) : undefined;
    },
    async create(ask, target) {
      const mr = (await call(
        base,
        {
          method: 'POST',
          headers,
          body: {
            source_branch: ask.branch,
            target_branch: target,
            title: ask.title,
            description: ask.body,
          },
          ...(ask.signal ? { signal: ask.signal } : {}),
        },
        409,
      )) as { web_url: string; iid: number } | undefined;
      return mr && opened(mr);
    },
  };
}

const JOINED = { merge: 'merged', squash: 'squashed', 'fast-forward': 'fast-forwarded' } as const;

/** The request's title and body: the instruction, the tasks and the diff stat. */
export function describeRequest(
  instruction: string,
  sessionId: string,
  outcome: IntegrationOutcome,
): { title: string; body: string } {
  const first = instruction.trim().split('\n')[0] ?? '';
  const title = first.length > 72 ? `${first.slice(0, 71)}…` : first;
  const body = [
    instruction.trim(),
    '',
    `Made by orq session \`${sessionId}\`: ${outcome.tasks.length} task(s), ${JOINED[outcome.strategy]} into \`${outcome.branch}\`.`,
    '',
    ...outcome.tasks.map((t) => `- ${t.taskId}: ${t.title}`),
    '',
    '```',
    outcome.diffStat || '(no changes)',
    '```',
    ...(outcome.checks.length > 0
      ? [
          '',
          ...outcome.checks.map(
            (c) => `- check ${c.name} (${c.mode}): ${c.passed ? 'passed' : 'failed'}`,
          ),
        ]
      : []),
  ].join('\n');
  return { title: title || `orq session ${sessionId}`, body };
}
