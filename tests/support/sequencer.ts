import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * Seconds each of the slowest files took alone on 2 cores (2026-11-27; 2026-11-28 for the
 * integration, quota-line and executors-command files; integration-session and
 * integration-kill estimated from a run at load 7-11, with the final judgement's tests). Used only when Vitest
 * knows no duration of its own (a fresh checkout, as in CI, where `npm ci` empties
 * node_modules/.vite): it would start the files by size, and reliability-load, a small file,
 * last. An estimate that goes stale only orders the files less well.
 */
const ESTIMATED_SECONDS: Record<string, number> = {
  'tests/integration/executors-command.test.ts': 38,
  'tests/integration/integration-merge.test.ts': 35,
  'tests/e2e/cli-sessions.test.ts': 30,
  'tests/e2e/approval-kill.test.ts': 30,
  'tests/e2e/cli-approval.test.ts': 18,
  'tests/e2e/interrupt.test.ts': 30,
  'tests/unit/compose.test.ts': 30,
  'tests/e2e/reliability-load.test.ts': 25,
  'tests/e2e/cli-errors.test.ts': 20,
  'tests/e2e/cli-private-redis-sessions.test.ts': 20,
  'tests/integration/integration-session.test.ts': 35,
  'tests/integration/quota-line.test.ts': 25,
  'tests/e2e/quota-line-kill.test.ts': 15,
  'tests/e2e/reliability-redis.test.ts': 18,
  'tests/e2e/processes.test.ts': 17,
  'tests/e2e/reliability-kill.test.ts': 15,
  'tests/e2e/integration-kill.test.ts': 15,
};

/**
 * Longest files first, so that none starts late and ends the run alone: Vitest's own order by
 * the durations of its last run, or, with none recorded, the estimates above, then size.
 */
export class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const { root } = this.ctx.config;
    const key = (file: TestSpecification) => relative(root, file.moduleId);
    const known = files.some((file) =>
      this.ctx.cache.getFileTestResults(`${file.project.name}:${key(file)}`),
    );
    if (known) return sorted;
    const estimate = (file: TestSpecification) => ESTIMATED_SECONDS[key(file)] ?? 0;
    // Stable: files without an estimate keep Vitest's order (larger first).
    return sorted.sort((a, b) => estimate(b) - estimate(a));
  }
}
