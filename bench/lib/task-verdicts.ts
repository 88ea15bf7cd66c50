import {
  confirmVerdict,
  type CostlyVerdict,
  type TaskVerdict,
} from '../../src/shared/rules/task-verdict.js';
import { seededRng, type Rng } from './random.js';

/**
 * Task verdicts under a task judge of known accuracy (issue 38): each execution has a true
 * verdict; the simulated judge returns it with probability `accuracy`, otherwise one of the three
 * others at random, independently on each call. With `confirm`, costly verdicts go through
 * confirmVerdict (a second opinion, a third on disagreement), as confirmedTaskJudge does.
 * Pure computation, no Redis.
 */

const VERDICTS: TaskVerdict[] = ['done', 'continue', 'replan', 'blocked'];

/** How often each verdict is the true one: most executions are done, few need a replan or block. */
export const TRUE_VERDICT_SHARES: Record<TaskVerdict, number> = {
  done: 0.6,
  continue: 0.2,
  replan: 0.15,
  blocked: 0.05,
};

export interface VerdictOutcome {
  verdicts: number;
  judgeCalls: number;
  /** Verdicts acted on that differ from the true one. */
  wrong: number;
  /** A replan or block acted on where the truth was neither that. */
  wrongCostly: number;
  /** A true replan or block that was not acted on as such. */
  missedCostly: number;
}

function draw(rng: Rng): TaskVerdict {
  let u = rng();
  for (const v of VERDICTS) {
    u -= TRUE_VERDICT_SHARES[v];
    if (u < 0) return v;
  }
  return 'done';
}

function opinion(truth: TaskVerdict, accuracy: number, rng: Rng): TaskVerdict {
  if (rng() < accuracy) return truth;
  const others = VERDICTS.filter((v) => v !== truth);
  return others[Math.floor(rng() * others.length)] as TaskVerdict;
}

export function simulateTaskVerdicts(options: {
  accuracy: number;
  confirm: readonly CostlyVerdict[];
  verdicts: number;
  truthSeed: number;
  noiseSeed: number;
}): VerdictOutcome {
  const truthRng = seededRng(options.truthSeed);
  const noise = seededRng(options.noiseSeed);
  const isCostly = (v: TaskVerdict) => v === 'replan' || v === 'blocked';
  const outcome: VerdictOutcome = {
    verdicts: options.verdicts,
    judgeCalls: 0,
    wrong: 0,
    wrongCostly: 0,
    missedCostly: 0,
  };
  for (let i = 0; i < options.verdicts; i += 1) {
    const truth = draw(truthRng);
    const opinions: TaskVerdict[] = [];
    let acted: TaskVerdict;
    for (;;) {
      opinions.push(opinion(truth, options.accuracy, noise));
      const step = confirmVerdict(opinions, options.confirm);
      if (step.settled) {
        acted = opinions[step.index] as TaskVerdict;
        break;
      }
    }
    outcome.judgeCalls += opinions.length;
    if (acted !== truth) outcome.wrong += 1;
    if (isCostly(acted) && acted !== truth) outcome.wrongCostly += 1;
    if (isCostly(truth) && acted !== truth) outcome.missedCostly += 1;
  }
  return outcome;
}
