import { describe, expect, it } from 'vitest';
import { callerLimitIssues } from '../../src/shared/config/caller-limits.js';
import { parseConfig } from '../../src/shared/config/load.js';
import { ApprovalConfig, type StepRule } from '../../src/shared/config/schema.js';
import {
  commandOf,
  describeStepRule,
  stepRuleFor,
  type StepCall,
} from '../../src/shared/rules/step-approval.js';

const ROOT = '/work/ws/s1/t1';
const push: StepRule = { tool: 'run_command', match: '^git push' };
const anyCommand: StepRule = { command: '.*' };
const outside: StepRule = { writeOutsideWorktree: true };
const tool = (name: string, input: unknown): StepCall => ({ kind: 'tool', tool: name, input });

describe('approval.steps: which step waits for a person', () => {
  const cases: [string, StepRule[], StepCall, StepRule | undefined][] = [
    ['no rule: nothing waits', [], tool('run_command', { command: ['git', 'push'] }), undefined],
    [
      'a tool rule with a match: its command',
      [push],
      tool('run_command', { command: ['git', 'push', 'origin', 'main'] }),
      push,
    ],
    [
      'a tool rule: another command runs',
      [push],
      tool('run_command', { command: ['git', 'status'] }),
      undefined,
    ],
    ['a tool rule: another tool runs', [push], tool('write_file', { path: 'git push' }), undefined],
    [
      'a tool rule without match: every call',
      [{ tool: 'write_file' }],
      tool('write_file', { path: 'a.md' }),
      { tool: 'write_file' },
    ],
    ['* is any tool', [{ tool: '*' }], tool('read_file', { path: 'a' }), { tool: '*' }],
    [
      'a match on a file tool: its path',
      [{ tool: 'write_file', match: '\\.env$' }],
      tool('write_file', { path: 'config/.env', content: 'x' }),
      { tool: 'write_file', match: '\\.env$' },
    ],
    [
      'a match on another tool: its input as JSON',
      [{ tool: 'calc__add', match: '"a":1' }],
      tool('calc__add', { a: 1, b: 2 }),
      { tool: 'calc__add', match: '"a":1' },
    ],
    [
      'a command rule: the command executor run',
      [anyCommand],
      { kind: 'command', command: 'claude -p x' },
      anyCommand,
    ],
    [
      'a command rule: an agent run_command too',
      [{ command: 'rm -rf' }],
      tool('run_command', { command: ['rm', '-rf', 'build'] }),
      { command: 'rm -rf' },
    ],
    [
      'a command rule: not a tool that starts nothing',
      [anyCommand],
      tool('write_file', { path: 'a' }),
      undefined,
    ],
    [
      'a tool rule never matches the command executor',
      [{ tool: '*' }],
      { kind: 'command', command: 'x' },
      undefined,
    ],
    [
      'outside: an absolute path elsewhere',
      [outside],
      tool('fs__write_file', { path: '/etc/hosts' }),
      outside,
    ],
    ['outside: a climb out', [outside], tool('fs__edit', { file_path: '../t2/a.md' }), outside],
    ['outside: inside is fine', [outside], tool('fs__write_file', { path: 'src/a.ts' }), undefined],
    [
      'outside: an absolute path inside is fine',
      [outside],
      tool('fs__write_file', { path: `${ROOT}/a` }),
      undefined,
    ],
    [
      'outside: a reading tool is not a write',
      [outside],
      tool('fs__read_file', { path: '/etc/hosts' }),
      undefined,
    ],
    [
      'the first matching rule is the one named',
      [push, anyCommand],
      tool('run_command', { command: ['git', 'push'] }),
      push,
    ],
  ];
  it.each(cases)('%s', (_name, rules, call, expected) => {
    expect(stepRuleFor(rules, call, ROOT)).toEqual(expected);
  });

  it("reads run_command's argv as the command line a person reads", () => {
    expect(commandOf(tool('run_command', { command: ['git', 'commit', '-m', 'a message'] }))).toBe(
      'git commit -m "a message"',
    );
    expect(commandOf({ kind: 'command', command: 'claude -p x' })).toBe('claude -p x');
    expect(commandOf(tool('write_file', { command: ['x'] }))).toBeUndefined();
  });

  it('describes a rule for the person who decides', () => {
    expect(describeStepRule(push)).toBe('tool run_command with input matching /^git push/');
    expect(describeStepRule(anyCommand)).toBe('command matches /.*/');
    expect(describeStepRule(outside)).toBe('writes outside the workspace');
  });

  it('refuses a rule that is not one of the three shapes, or a pattern that does not compile', () => {
    expect(ApprovalConfig.safeParse({ steps: [{ tool: 'run_command', match: '(' }] }).success).toBe(
      false,
    );
    expect(ApprovalConfig.safeParse({ steps: [{ command: '^git', tool: 'x' }] }).success).toBe(
      false,
    );
    expect(ApprovalConfig.safeParse({ steps: [{ writeOutsideWorktree: false }] }).success).toBe(
      false,
    );
    expect(ApprovalConfig.parse({}).steps).toEqual([]);
    expect(() => parseConfig({ approval: { steps: [{ comand: '^git' }] } })).toThrow(
      'approval.steps.0: a step rule is one of { tool: NAME, match?: REGEX }, { command: REGEX } or { writeOutsideWorktree: true }',
    );
    expect(() => parseConfig({ approval: { steps: [{ tool: 'x', match: '(' }] } })).toThrow(
      'approval.steps.0.match: not a valid regular expression',
    );
  });
});

describe('approval.steps over HTTP: a submit may add rules, never drop the server’s', () => {
  const operator = parseConfig({ approval: { steps: [{ command: '^git push' }] } });

  it('refuses a submit that drops a rule the server requires', () => {
    const chosen = parseConfig({ approval: { steps: [{ tool: 'write_file' }] } });
    expect(callerLimitIssues(operator, chosen, [])).toEqual([
      expect.objectContaining({
        path: 'config.approval.steps',
        message: expect.stringContaining('{"command":"^git push"}'),
      }),
    ]);
  });

  it('takes a submit that keeps them and adds its own', () => {
    const chosen = parseConfig({
      approval: { steps: [{ command: '^git push' }, { tool: 'write_file' }] },
    });
    expect(callerLimitIssues(operator, chosen, [])).toEqual([]);
    expect(callerLimitIssues(parseConfig({}), chosen, [])).toEqual([]);
  });
});

describe('approval.stepTimeoutSeconds and onStepTimeout', () => {
  it('waits for ever by default, and rejects on a timeout unless told to approve', () => {
    expect(ApprovalConfig.parse({})).toMatchObject({ onStepTimeout: 'reject' });
    expect(ApprovalConfig.parse({}).stepTimeoutSeconds).toBeUndefined();
    expect(
      ApprovalConfig.parse({ stepTimeoutSeconds: 60, onStepTimeout: 'approve' }),
    ).toMatchObject({ stepTimeoutSeconds: 60, onStepTimeout: 'approve' });
  });

  it('takes the bounds of approval.timeoutSeconds: whole seconds from 1 to 30 days', () => {
    for (const bad of [0, 1.5, 30 * 24 * 3600 + 1]) {
      expect(() => parseConfig({ approval: { stepTimeoutSeconds: bad } })).toThrow(
        'approval.stepTimeoutSeconds',
      );
    }
    expect(() => parseConfig({ approval: { onStepTimeout: 'skip' } })).toThrow(
      'approval.onStepTimeout',
    );
  });

  it('leaves plan approvals to approval.timeoutSeconds and onTimeout', () => {
    const config = parseConfig({ approval: { stepTimeoutSeconds: 5, onStepTimeout: 'approve' } });
    expect(config.approval).toMatchObject({ onTimeout: 'reject' });
    expect(config.approval.timeoutSeconds).toBeUndefined();
  });
});

describe('a step timeout over HTTP: a submit may not approve on it where the server does not', () => {
  const operator = parseConfig({ approval: { steps: [{ command: '^git push' }] } });
  const steps = [{ command: '^git push' }];
  const paths = (chosen: unknown, server = operator) =>
    callerLimitIssues(server, parseConfig(chosen), []).map((i) => i.path);

  it('refuses a timeout that approves a step the server has a person approve', () => {
    expect(paths({ approval: { steps, stepTimeoutSeconds: 1, onStepTimeout: 'approve' } })).toEqual(
      ['config.approval.onStepTimeout'],
    );
  });

  it('refuses one sooner than the server’s own approving timeout', () => {
    const server = parseConfig({
      approval: { steps, stepTimeoutSeconds: 600, onStepTimeout: 'approve' },
    });
    expect(
      paths({ approval: { steps, stepTimeoutSeconds: 60, onStepTimeout: 'approve' } }, server),
    ).toEqual(['config.approval.onStepTimeout']);
    expect(
      paths({ approval: { steps, stepTimeoutSeconds: 900, onStepTimeout: 'approve' } }, server),
    ).toEqual([]);
  });

  it('takes a timeout that rejects, and any timeout where the server has no step rules', () => {
    expect(paths({ approval: { steps, stepTimeoutSeconds: 1 } })).toEqual([]);
    expect(
      paths(
        { approval: { steps, stepTimeoutSeconds: 1, onStepTimeout: 'approve' } },
        parseConfig({}),
      ),
    ).toEqual([]);
  });
});
