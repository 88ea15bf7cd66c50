/**
 * Checks the relative links and anchors of Markdown files, offline. remark-validate-links is the
 * unified collective's maintained checker: run through unified-engine (as its CLI does), it also
 * checks links to headings in other files, which its plain API does not. It reads files only;
 * with `repository: false` it never asks git or the network for a remote.
 */
import { resolve } from 'node:path';
import { engine, type Context, type Options as EngineOptions } from 'unified-engine';
import { remark } from 'remark';
import remarkGfm from 'remark-gfm';
import remarkValidateLinks, { type Options } from 'remark-validate-links';

export interface LinkProblem {
  /** Absolute path. */
  file: string;
  line: number | undefined;
  message: string;
}

/** Every broken relative link or anchor in `files` (paths relative to `root`). */
export async function brokenLinks(root: string, files: readonly string[]): Promise<LinkProblem[]> {
  const checked = await new Promise<Context['files']>((resolve, reject) => {
    engine(
      {
        processor: remark().use(remarkGfm),
        cwd: root,
        files: [...files],
        // GitHub's heading ids (github-slugger), with no remote looked up. The engine hands the
        // plugin its file set as a second argument, which unified's Plugin type does not know.
        plugins: [
          [remarkValidateLinks, { repository: false, root } satisfies Options],
        ] as EngineOptions['plugins'],
        extensions: ['md'],
        ignoreName: '.remarkignore',
        detectConfig: false,
        // The report goes to the caller, not to a terminal.
        out: false,
        quiet: true,
        silent: true,
        streamError: { write: () => true } as unknown as NodeJS.WritableStream,
      },
      (error, _code, context) => {
        if (error) reject(error);
        else resolve(context?.files ?? []);
      },
    );
  });
  return checked.flatMap((file) =>
    file.messages.map((message) => ({
      file: resolve(file.cwd, file.path),
      line: message.line,
      message: message.reason,
    })),
  );
}
