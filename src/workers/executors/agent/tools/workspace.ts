import { constants, type Dirent } from 'node:fs';
import { mkdir, open, readdir, realpath, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { RE2JS } from 're2js';
import { z } from 'zod';
import { describeOutcome, minimalEnv, runProcess } from '../../process.js';
import type { Sandbox } from '../../sandbox.js';
import { isWithin, resolveInWorkspace, workspaceRelative } from './paths.js';
import { ToolError, type Tool, type ToolOutcome } from './types.js';

export interface WorkspaceToolsOptions {
  /** Real path of the task's workspace; no tool reaches outside it. */
  root: string;
  timeoutMs: number;
  maxOutputBytes: number;
  /** Programs run_command may start (argv[0], exactly); any when undefined. */
  commandAllowlist?: readonly string[];
  /** Where run_command's programs run (sandbox.ts); none when unset. */
  sandbox?: Sandbox | { error: string };
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
      const handle = await openRegularFile(root, absolute, path, constants.O_RDONLY);
      try {
        const info = await handle.stat();
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
      // Truncated only once the opened file is known to be the workspace's own (no O_TRUNC):
      // a hardlink to a file outside must be refused before anything of it is lost.
      const flags =
        constants.O_WRONLY |
        constants.O_CREAT |
        constants.O_NOFOLLOW |
        (append ? constants.O_APPEND : 0);
      const handle = await openRegularFile(root, absolute, path, flags);
      try {
        if (!append) await handle.truncate(0);
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
        let text: string;
        try {
          const handle = await openRegularFile(root, found, found, constants.O_RDONLY);
          try {
            if ((await handle.stat()).size > MAX_SEARCHED_FILE_BYTES) continue;
            text = await handle.readFile('utf8');
          } finally {
            await handle.close();
          }
        } catch {
          // A hardlink, a file swapped for a FIFO or a symlink since the listing: not searched.
          continue;
        }
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
      const sandbox = options.sandbox;
      if (sandbox && 'error' in sandbox) throw new ToolError(`refused: ${sandbox.error}`);
      const outcome = await runProcess(sandbox ? sandbox.wrap(command) : command, {
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

/**
 * Opens a file of the workspace and refuses (closing it) what a tool must not touch: anything
 * but a regular file (a FIFO would hang the read, a device could be anything), a file with more
 * than one link (a hardlink to a file outside the workspace looks like any other file; no path
 * check can see it), and a file whose real path is outside (a symlink put in the way since the
 * path was checked). O_NONBLOCK makes opening a FIFO return at once, so the check is reached;
 * it changes nothing for a regular file. The checks are on the opened file, not on the path.
 */
async function openRegularFile(
  root: string,
  absolute: string,
  requested: string,
  flags: number,
): Promise<FileHandle> {
  let handle: FileHandle;
  try {
    handle = await open(absolute, flags | constants.O_NONBLOCK, 0o644);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    // ENXIO: a FIFO nobody reads, opened for writing without blocking.
    if (code === 'ENXIO') throw new ToolError(`"${requested}" is not a regular file`);
    if (code === 'ELOOP') {
      throw new ToolError(`"${requested}" is a symlink; write to the file it points to`);
    }
    throw error;
  }
  try {
    const opened = await openedPath(handle.fd);
    if (opened !== undefined && !isWithin(root, opened)) {
      throw new ToolError(`path "${requested}" leads outside the workspace through a symlink`);
    }
    const info = await handle.stat();
    if (!info.isFile()) {
      throw new ToolError(
        `"${requested}" is not a regular file${info.isDirectory() ? ' (a folder: use list_files)' : ''}`,
      );
    }
    if (info.nlink > 1) {
      throw new ToolError(
        `"${requested}" has ${info.nlink} hard links: a file linked from elsewhere may lie outside the workspace, so the file tools refuse it`,
      );
    }
    return handle;
  } catch (error) {
    await handle.close();
    throw error;
  }
}

/** The real path of an open file, on Linux (/proc); undefined where that cannot be read. */
async function openedPath(fd: number): Promise<string | undefined> {
  return realpath(`/proc/self/fd/${fd}`).catch(() => undefined);
}
