import type { NoisePool } from '../rules/adaptive-judging.js';
import type { RedisConnection } from '../redis.js';

/**
 * What adaptive judging has learned of each judge's noise (issue 38): the pooled spread of its
 * repeated scores on earlier plans, per judge (provider and model), shared by every pod and
 * kept across restarts. One hash `prefix:judge-noise`, two fields per judge:
 *   `<judge>|ss`  sum of squared deviations of each plan's scores from that plan's mean
 *   `<judge>|df`  their degrees of freedom (a plan's calls minus one, summed)
 * Both only grow (HINCRBYFLOAT in one MULTI); adaptive-judging.ts's learnedWeight bounds how
 * much of it counts. Losing it costs calls, never a decision's correctness: the prior stands.
 */
export class JudgeNoiseStore {
  private readonly key: string;

  constructor(
    private readonly redis: RedisConnection,
    prefix: string,
  ) {
    this.key = judgeNoiseKey(prefix);
  }

  /** The judge's pooled spread; undefined when none was recorded. */
  async read(judge: string): Promise<NoisePool | undefined> {
    const [ss, df] = await this.redis.hmget(this.key, `${judge}|ss`, `${judge}|df`);
    const degrees = Number(df ?? 0);
    const sumSquares = Number(ss ?? 0);
    if (!(degrees > 0) || !Number.isFinite(sumSquares) || sumSquares < 0) return undefined;
    return { sumSquares, degrees };
  }

  /** Adds one plan's spread (spreadOf its scores); nothing for a plan judged once. */
  async add(judge: string, spread: NoisePool): Promise<void> {
    if (spread.degrees <= 0) return;
    await this.redis
      .multi()
      .hincrbyfloat(this.key, `${judge}|ss`, spread.sumSquares)
      .hincrbyfloat(this.key, `${judge}|df`, spread.degrees)
      .exec();
  }
}

export const judgeNoiseKey = (prefix: string) => `${prefix}:judge-noise`;
