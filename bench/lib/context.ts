import type { BenchRedis } from './redis.js';
import type { OrqPod } from './processes.js';
import type { Reporter } from './report.js';

/** What every benchmark scenario gets. */
export interface BenchContext {
  quick: boolean;
  redis: BenchRedis;
  reporter: Reporter;
  /** A temp directory for scenario files, removed at the end. */
  tmpDir: string;
  /** Child processes started by scenarios; stopped at the end even when a scenario throws. */
  pods: Set<OrqPod>;
  /** Empties the bench Redis; call with every consumer of the previous step closed. */
  flush(): Promise<void>;
}

export interface BenchScenario {
  name: string;
  description: string;
  run(ctx: BenchContext): Promise<void>;
}
