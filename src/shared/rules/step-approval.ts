import { isAbsolute, relative, resolve, sep } from 'node:path';
import type { StepRule } from '../config/schema.js';

/**
 * approval.steps (issue 48): which steps of a running task wait for a person first. Pure: the
 * executors ask it before a tool call or a program starts, with the task's workspace root.
 */

/** A step about to run: an agent's tool call, or the command executor's program. */
export type StepCall =
  { kind: 'tool'; tool: string; input: unknown } | { kind: 'command'; command: string };

/** The input fields a file tool names its path in (orq's own use `path`). */
const PATH_FIELDS = ['path', 'file_path', 'filePath', 'file', 'target', 'destination', 'to'];

/** Tool names that say the tool changes files. */
const WRITING_TOOL = /write|edit|create|move|rename|delete|remove|mkdir|patch|append|copy|save/i;

/** A command line as a person reads it: arguments with spaces or quotes quoted. */
export const commandLine = (argv: readonly string[]): string =>
  argv.map((arg) => (/^[\w@%+=:,./-]+$/.test(arg) ? arg : JSON.stringify(arg))).join(' ');

/**
 * The command a step starts, if it starts one: the executor's, or run_command's (its argv,
 * `["git", "push"]`, as the line `git push`).
 */
export function commandOf(call: StepCall): string | undefined {
  if (call.kind === 'command') return call.command;
  if (call.tool !== 'run_command') return undefined;
  const command = (call.input as { command?: unknown } | null)?.command;
  if (typeof command === 'string') return command;
  return Array.isArray(command) && command.every((a) => typeof a === 'string')
    ? commandLine(command)
    : undefined;
}

function pathsOf(input: unknown): string[] {
  if (!input || typeof input !== 'object') return [];
  const record = input as Record<string, unknown>;
  return PATH_FIELDS.flatMap((field) => (typeof record[field] === 'string' ? [record[field]] : []));
}

/** What a `{tool, match}` rule's pattern is tried on: the command, the path, else the JSON. */
function inputText(tool: string, input: unknown): string {
  if (tool === 'run_command') {
    const command = commandOf({ kind: 'tool', tool, input });
    if (command !== undefined) return command;
  }
  const paths = pathsOf(input);
  if (paths.length > 0) return paths.join('\n');
  return JSON.stringify(input ?? null);
}

function outside(root: string, path: string): boolean {
  const rel = relative(root, resolve(root, path));
  return rel === '..' || rel.startsWith(`..${sep}`) || isAbsolute(rel);
}

/** Whether `rule` asks a person before `call` runs in the workspace `root`. */
export function ruleMatches(rule: StepRule, call: StepCall, root: string): boolean {
  if ('command' in rule) {
    const command = commandOf(call);
    return command !== undefined && new RegExp(rule.command).test(command);
  }
  if (call.kind !== 'tool') return false;
  if ('tool' in rule) {
    if (rule.tool !== '*' && rule.tool !== call.tool) return false;
    return (
      rule.match === undefined || new RegExp(rule.match).test(inputText(call.tool, call.input))
    );
  }
  return WRITING_TOOL.test(call.tool) && pathsOf(call.input).some((path) => outside(root, path));
}

/** The first of `rules` that asks a person before `call` runs, if any. */
export function stepRuleFor(
  rules: readonly StepRule[],
  call: StepCall,
  root: string,
): StepRule | undefined {
  return rules.find((rule) => ruleMatches(rule, call, root));
}

/** A rule as the person and the history are shown it. */
export function describeStepRule(rule: StepRule): string {
  if ('command' in rule) return `command matches /${rule.command}/`;
  if ('tool' in rule) {
    const tool = rule.tool === '*' ? 'any tool' : `tool ${rule.tool}`;
    return rule.match === undefined ? tool : `${tool} with input matching /${rule.match}/`;
  }
  return 'writes outside the workspace';
}
