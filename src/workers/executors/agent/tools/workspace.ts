import { constants, type Dirent } from 'node:fs';
import { mkdir, open, readdir, readFile, realpath, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { RE2JS } from 're2js';
import { z } from 'zod';
import { describeOutcome, minimalEnv, runProcess } from '../../process.js';
import { isWithin, resolveInWorkspace, workspaceRelative } from './paths.js';
import { ToolError, type Tool, type ToolOutcome } from './types.js';

export interface WorkspaceToolsOptions {
  /** Real path of the task's workspace; no tool reaches outside it. */
  root: string;
  timeoutMs: number;
  maxOutputBytes: number;
  /** Programs run_command may start (argv[0], exactly); any when undefined. */
  commandAllowlist?: readonly string[];
}

const MAX_LISTED = 1000;
const MAX_MATCHES = 200;
const MAX_SEARCHED_FILE_BYTES = 1_048_576;
const MAX_LINE_CHARS = 500;

const ReadFileInput = z.strictObject({
  path: z.string().describe('File path relative to the workspace.'),
});
const WriteFileInput = z.strictObject({
  path: z.string().describe('File path relative to the workspace; parent folders are created.'),
  content: z.string(),
  append: z.boolean().default(false).describe('Append instead of replacing the file.'),
});
const ListFilesInput = z.strictObject({
  path: z.string().default('.').describe('Folder relative to the workspace.'),
  recursive: z.boolean().default(true),
});
const SearchFilesInput = z.strictObject({
  pattern: z
    .string()
    .min(1)
    .describe('Text to find, or a regular expression (RE2 syntax) when regex is true.'),
  regex: z.boolean().default(false),
  ignoreCase: z.boolean().default(false),
  path: z.string().default('.').describe('Folder to search, relative to the workspace.'),
});
const RunCommandInput = z.strictObject({
  command: z
    .array(z.string())
    .min(1)
    .describe('argv: the program and its arguments, run without a shell.'),
  cwd: z.string().default('.').describe('Working folder relative to the workspace.'),
});

function parseInput<T extends z.ZodType>(schema: T, input: unknown, tool: string): z.infer<T> {
  const result = schema.safeParse(input ?? {});
  if (result.success) return result.data;
  const issues = result.error.issues.map((i) => `${i.path.join('.') || 'input'}: ${i.message}`);
  throw new ToolError(`invalid input for ${tool}: ${issues.join('; ')}`);
}

function spec(name: string, description: string, schema: z.ZodType) {
  const { $schema: _ignored, ...inputSchema } = z.toJSONSchema(schema, { io: 'input' });
  return { name, description, inputSchema };
}

function capText(text: string, maxBytes: number): string {
  const bytes = Buffer.byteLength(text);
  if (bytes <= maxBytes) return text;
  const kept = Buffer.from(text).subarray(0, maxBytes).toString('utf8');
  return `${kept}\n[... ${bytes - maxBytes} more bytes cut off ...]`;
}

/** Files and folders below `dir`, without following symlinks (they are listed, not entered). */
async function* walk(
  dir: string,
  recursive: boolean,
): AsyncGenerator<{ path: string; entry: Dirent }> {
  let entries: Dirent[];
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return;
  }
  entries.sort((a, b) => a.name.localeCompare(b.name));
  for (const entry of entries) {
    const path = join(dir, entry.name);
    yield { path, entry };
    if (recursive && entry.isDirectory() && entry.name !== '.git') yield* walk(path, recursive);
  }
}

/** read_file, write_file, list_files, search_files and run_command, confined to one folder. */
export function createWorkspaceTools(options: WorkspaceToolsOptions): Tool[] {
  const { root, maxOutputBytes } = options;
  const ok = (output: string): ToolOutcome => ({
    ok: true,
    output: capText(output, maxOutputBytes),
  });

  const readFileTool: Tool = {
    spec: spec('read_file', 'Read a text file of the workspace.', ReadFileInput),
    async call(input) {
      const { path } = parseInput(ReadFileInput, input, 'read_file');
      const absolute = await resolveInWorkspace(root, path);
      const handle = await open(absolute, 'r');
      try {
        // Where the opened file really is: a symlink put in the way since the check is caught.
        const opened = await openedPath(handle.fd);
        if (opened !== undefined && !isWithin(root, opened)) {
          throw new ToolError(`path "${path}" leads outside the workspace through a symlink`);
        }
        const info = await handle.stat();
        if (!info.isFile()) throw new ToolError(`"${path}" is not a file`);
        // Only what can be shown is read, not the whole of a large file.
        const buffer = Buffer.alloc(Math.min(info.size, maxOutputBytes));
        const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
        const text = buffer.subarray(0, bytesRead).toString('utf8');
        if (info.size <= maxOutputBytes) return ok(text);
        return {
          ok: true,
          output: `${text}\n[... ${info.size - bytesRead} more bytes cut off ...]`,
        };
      } finally {
        await handle.close();
      }
    },
  };

  const writeFileTool: Tool = {
    spec: spec(
      'write_file',
      'Create or overwrite (or append to) a file of the workspace.',
      WriteFileInput,
    ),
    async call(input) {
      const { path, content, append } = parseInput(WriteFileInput, input, 'write_file');
      const absolute = await resolveInWorkspace(root, path);
      await mkdir(dirname(absolute), { recursive: true });
      // Checked again after creating folders, and O_NOFOLLOW refuses a symlink put in the way.
      await resolveInWorkspace(root, path);
      const flags =
        constants.O_WRONLY |
        constants.O_CREAT |
        constants.O_NOFOLLOW |
        (append ? constants.O_APPEND : constants.O_TRUNC);
      const handle = await open(absolute, flags, 0o644);
      try {
        await handle.writeFile(content, 'utf8');
      } finally {
        await handle.close();
      }
      const rel = workspaceRelative(root, absolute);
      return ok(`${append ? 'appended' : 'wrote'} ${Buffer.byteLength(content)} bytes to ${rel}`);
    },
  };

  const listFilesTool: Tool = {
    spec: spec(
      'list_files',
      'List files of the workspace (folders end with /, symlinks with @).',
      ListFilesInput,
    ),
    async call(input) {
      const { path, recursive } = parseInput(ListFilesInput, input, 'list_files');
      const absolute = await resolveInWorkspace(root, path);
      const lines: string[] = [];
      for await (const { path: found, entry } of walk(absolute, recursive)) {
        if (lines.length >= MAX_LISTED) {
          lines.push(`[... more than ${MAX_LISTED} entries; list a subfolder ...]`);
          break;
        }
        const rel = workspaceRelative(root, found);
        lines.push(entry.isDirectory() ? `${rel}/` : entry.isSymbolicLink() ? `${rel}@` : rel);
      }
      return ok(lines.length > 0 ? lines.join('\n') : '(empty)');
    },
  };

  const searchFilesTool: Tool = {
    spec: spec(
      'search_files',
      'Find lines containing a text (or matching a regular expression) in the workspace files.',
      SearchFilesInput,
    ),
    async call(input) {
      const args = parseInput(SearchFilesInput, input, 'search_files');
      const absolute = await resolveInWorkspace(root, args.path);
      let matcher: (line: string) => boolean;
      if (args.regex) {
        // RE2 (linear time), not RegExp: a model's `^(a+)+$` would backtrack for minutes on
        // the pod's one thread, stopping its lock renewals and every other job with it.
        let re: RE2JS;
        try {
          re = RE2JS.compile(args.pattern, args.ignoreCase ? RE2JS.CASE_INSENSITIVE : 0);
        } catch (error) {
          throw new ToolError(
            `invalid regular expression (RE2 syntax: no backreferences or lookaround): ${(error as Error).message}`,
          );
        }
        matcher = (line) => re.test(line);
      } else {
        const needle = args.ignoreCase ? args.pattern.toLowerCase() : args.pattern;
        matcher = (line) => (args.ignoreCase ? line.toLowerCase() : line).includes(needle);
      }
      const matches: string[] = [];
      // The tool's time limit holds for a search too: a huge tree is cut short, and says so.
      const deadline = Date.now() + options.timeoutMs;
      search: for await (const { path: found, entry } of walk(absolute, true)) {
        // At the deadline, not only past it: a walk of a few cached files can fit in the
        // millisecond a limit of 0 ends in.
        if (Date.now() >= deadline) {
          matches.push(
            `[... search stopped after ${Math.round(options.timeoutMs / 1000)}s; search a subfolder ...]`,
          );
          break;
        }
        if (!entry.isFile()) continue;
        const info = await stat(found);
        if (info.size > MAX_SEARCHED_FILE_BYTES) continue;
        const text = await readFile(found, 'utf8');
        if (text.includes('\0')) continue;
        const rel = workspaceRelative(root, found);
        const lines = text.split('\n');
        for (let i = 0; i < lines.length; i++) {
          const line = (lines[i] ?? '').slice(0, MAX_LINE_CHARS);
          if (!matcher(line)) continue;
          if (matches.length >= MAX_MATCHES) {
            matches.push(`[... more than ${MAX_MATCHES} matches ...]`);
            break search;
          }
          matches.push(`${rel}:${i + 1}: ${line}`);
        }
      }
      return ok(matches.length > 0 ? matches.join('\n') : 'no matches');
    },
  };

  const runCommandTool: Tool = {
    spec: spec(
      'run_command',
      `Run a program in the workspace without a shell (time limit ${Math.round(options.timeoutMs / 1000)}s${
        options.commandAllowlist ? `; allowed programs: ${options.commandAllowlist.join(', ')}` : ''
      }).`,
      RunCommandInput,
    ),
    async call(input, signal) {
      const { command, cwd } = parseInput(RunCommandInput, input, 'run_command');
      const program = command[0] ?? '';
      if (options.commandAllowlist && !options.commandAllowlist.includes(program)) {
        throw new ToolError(
          `"${basename(program)}" is not an allowed command; allowed: ${options.commandAllowlist.join(', ') || '(none)'}`,
        );
      }
      const dir = await resolveInWorkspace(root, cwd);
      const outcome = await runProcess(command, {
        cwd: dir,
        timeoutMs: options.timeoutMs,
        maxOutputBytes,
        env: minimalEnv(),
        signal,
      });
      const how = describeOutcome(outcome, options.timeoutMs);
      const text = `${how}\n${outcome.output}`;
      // Already capped (the tail is kept: it tells how the command ended).
      return outcome.exitCode === 0 ? { ok: true, output: text } : { ok: false, error: text };
    },
  };

  return [readFileTool, writeFileTool, listFilesTool, searchFilesTool, runCommandTool];
}

/** The real path of an open file, on Linux (/proc); undefined where that cannot be read. */
async function openedPath(fd: number): Promise<string | undefined> {
  return realpath(`/proc/self/fd/${fd}`).catch(() => undefined);
}
