// Picks the best cell of a sweep and says why, in words a user can act on. Near-ties are
// common (on seed-sequential every setting shares the one cold request that sets p99), so
// cells within a small tolerance of the best count as tied and are separated by secondary
// metrics instead of by float noise, then by grid order.
import { optionFlag } from '@kvroute/policy';
import { fmtInt, fmtMs, fmtNum, fmtPct } from './format.ts';
import type { PolicyReport, SweepCell, SweepObjective, SweepReport } from './types.ts';

export const OBJECTIVES: readonly SweepObjective[] = [
  'ttft-p99',
  'ttft-p50',
  'ttft-mean',
  'hit-rate',
  'throughput',
];

/** Relative tolerance for TTFT and throughput objectives, absolute (in hit rate) for hit rate. */
const REL_TIE = 0.01;
const HIT_TIE = 0.001;

type Metric = (p: PolicyReport) => number;
const p99: Metric = (p) => p.ttftMs.p99;
const p50: Metric = (p) => p.ttftMs.p50;
const mean: Metric = (p) => p.ttftMs.mean;
const hit: Metric = (p) => p.hitRate;
const tput: Metric = (p) => p.throughputTokPerS;

interface ObjectiveInfo {
  /** The metric, and whether higher is better. */
  metric: Metric;
  higher: boolean;
  name: string;
  show: (x: number) => string;
  /** Tie-breakers, each lower-is-better. */
  tieBreak: Metric[];
}

const ms = (x: number) => `${fmtMs(x)} ms`;
const INFO: Record<SweepObjective, ObjectiveInfo> = {
  'ttft-p99': {
    metric: p99,
    higher: false,
    name: 'TTFT p99',
    show: ms,
    tieBreak: [mean, neg(hit)],
  },
  'ttft-p50': { metric: p50, higher: false, name: 'TTFT p50', show: ms, tieBreak: [p99, neg(hit)] },
  'ttft-mean': {
    metric: mean,
    higher: false,
    name: 'mean TTFT',
    show: ms,
    tieBreak: [p99, neg(hit)],
  },
  'hit-rate': {
    metric: hit,
    higher: true,
    name: 'token hit rate',
    show: fmtPct,
    tieBreak: [p99, mean],
  },
  throughput: {
    metric: tput,
    higher: true,
    name: 'throughput',
    show: (x) => `${fmtInt(x)} tok/s`,
    tieBreak: [p99, neg(hit)],
  },
};

function neg(m: Metric): Metric {
  return (p) => -m(p);
}

/** The objective's metric name and value of a report, as the verdict words them. */
export function objectiveValue(objective: SweepObjective, p: PolicyReport): string {
  return INFO[objective].show(INFO[objective].metric(p));
}

/** `prefix_match window=64 prefix-length=1024`; `round_robin (defaults)` for no options. */
export function settingLabel(s: Pick<SweepCell, 'method' | 'options'>): string {
  const opts = Object.entries(s.options).map(([k, v]) => `${optionFlag(k)}=${v}`);
  return opts.length === 0 ? `${s.method} (defaults)` : `${s.method} ${opts.join(' ')}`;
}

const at = settingLabel;

/** Lower is better, NaN last. */
function key(objective: SweepObjective): (c: SweepCell) => number {
  const { metric, higher } = INFO[objective];
  return (c) => nanLast(higher ? -metric(c.result) : metric(c.result));
}

function nanLast(x: number): number {
  return Number.isFinite(x) ? x : Number.POSITIVE_INFINITY;
}

/**
 * What the grid alone does not say: ranks the chosen setting leaves without prefill work (the
 * policy funnels every prompt elsewhere), how the recommended default method, run on the same
 * workload, compares with the chosen cell, and (given `current`) what switching would gain.
 */
export function sweepNotes(
  best: SweepCell,
  reference: PolicyReport | undefined,
  objective: SweepObjective,
  current?: SweepCell,
): string {
  const parts: string[] = [];
  const ranks = best.result.perRank ?? [];
  const idle = ranks.filter((r) => r.prefillTokens === 0).map((r) => r.rank);
  if (ranks.length > 0 && idle.length > 0) {
    const shown = idle.slice(0, 8).join(', ') + (idle.length > 8 ? ', ...' : '');
    parts.push(
      `At ${at(best)}, ${idle.length} of ${ranks.length} ranks prefill nothing (rank${idle.length > 1 ? 's' : ''} ${shown}): the setting sends every prompt's work to the other ${ranks.length - idle.length}.`,
    );
  }
  const info = INFO[objective];
  const k = key(objective);
  const verdict = (other: PolicyReport) => {
    const ko = k({ method: '', options: {}, result: other });
    const kb = k(best);
    return ko < kb ? 'better than the chosen setting' : ko > kb ? 'behind it' : 'level with it';
  };
  if (reference !== undefined) {
    parts.push(
      `The recommended default, ${reference.policy} with its default options, gets ${info.name} ${info.show(info.metric(reference))} on the same workload (chosen: ${info.show(info.metric(best.result))}; hit rate ${fmtPct(reference.hitRate)}, imbalance ${fmtNum(reference.imbalance)}): ${verdict(reference)}.`,
    );
  }
  if (current !== undefined) {
    parts.push(
      `The current setting, ${at(current)}, gets ${info.name} ${info.show(info.metric(current.result))} (hit rate ${fmtPct(current.result.hitRate)}): ${verdict(current.result)}.`,
    );
    const worse = worseThanCurrent(best, current, objective);
    if (worse !== undefined) parts.push(`Warning: ${worse}.`);
  }
  return parts.length > 0 ? ` ${parts.join(' ')}` : '';
}

/**
 * When the setting deployed now is predicted better than the chosen one on the sweep's own
 * objective: what switching would cost, in words; else undefined.
 */
export function worseThanCurrent(
  best: SweepCell,
  current: SweepCell | undefined,
  objective: SweepObjective,
): string | undefined {
  if (current === undefined) return undefined;
  const k = key(objective);
  if (!(k(current) < k(best))) return undefined;
  const info = INFO[objective];
  return `switching from the current setting (${at(current)}, ${info.name} ${info.show(info.metric(current.result))}) to ${at(best)} (${info.show(info.metric(best.result))}) is predicted to make ${info.name} worse: none of the swept settings beats the current one; keep it, or sweep its method too`;
}

/** Whether `c` is the cell the report names as best. */
export function isBestCell(report: Pick<SweepReport, 'best'>, c: SweepCell): boolean {
  if (c.method !== report.best.method) return false;
  const a = Object.keys(c.options);
  return (
    a.length === Object.keys(report.best.options).length &&
    a.every((k) => c.options[k] === report.best.options[k])
  );
}

/** The report's best cell. */
export function bestCell(report: SweepReport): SweepCell {
  const c = report.grid.find((x) => isBestCell(report, x));
  if (c === undefined) throw new Error('sweep report: best cell not in the grid');
  return c;
}

export function chooseBest(
  grid: readonly SweepCell[],
  objective: SweepObjective,
  hitRateWithin?: number,
): { best: SweepCell; reason: string } {
  if (grid.length === 0) throw new Error('chooseBest: empty sweep grid');
  // A setting under which no request completed has latencies of 0 over nothing: never the
  // best (unless no setting completed any).
  const served = grid.filter((c) => c.result.requests > 0);
  let eligible = served.length > 0 ? served : grid;
  let constraint =
    served.length > 0 && served.length < grid.length
      ? `${grid.length - served.length} of ${grid.length} settings completed no request and are left out. `
      : '';
  if (hitRateWithin !== undefined) {
    const pool = eligible;
    const top = [...pool].sort((a, b) => nanLast(-hit(a.result)) - nanLast(-hit(b.result)))[0]!;
    const floor = hit(top.result) - hitRateWithin / 100;
    eligible = pool.filter((c) => hit(c.result) >= floor - 1e-12);
    constraint += `Constraint: hit rate within ${hitRateWithin} points of the best (${fmtPct(hit(top.result))} at ${at(top)}); ${eligible.length} of ${pool.length} settings qualify. `;
  }
  const k = key(objective);
  const bestValue = Math.min(...eligible.map(k));
  const tied = eligible.filter((c) => {
    const v = k(c);
    if (objective === 'hit-rate') return v <= bestValue + HIT_TIE;
    return v <= bestValue + Math.abs(bestValue) * REL_TIE + 1e-9;
  });
  const then = INFO[objective].tieBreak;
  const order = new Map(grid.map((c, i) => [c, i]));
  const best = [...tied].sort((a, b) => {
    for (const m of then) {
      const d = nanLast(m(a.result)) - nanLast(m(b.result));
      if (d !== 0) return d;
    }
    return order.get(a)! - order.get(b)!;
  })[0]!;
  return {
    best,
    reason: `${constraint}${explain(eligible, objective, best, tied)}${sameAs(eligible, best)}`,
  };
}

/** Cells whose results equal the best's: the knob made no difference there, worth saying. */
function sameAs(grid: readonly SweepCell[], best: SweepCell): string {
  const same = (a: number, b: number) =>
    a === b || Math.abs(a - b) <= 1e-9 * Math.max(Math.abs(a), Math.abs(b));
  const twins = grid.filter(
    (c) =>
      c !== best &&
      same(p99(c.result), p99(best.result)) &&
      same(mean(c.result), mean(best.result)) &&
      same(hit(c.result), hit(best.result)) &&
      same(c.result.imbalance, best.result.imbalance),
  );
  if (twins.length === 0) return '';
  const shown = twins.slice(0, 4).map(at).join(', ');
  const more = twins.length > 4 ? ` and ${twins.length - 4} more` : '';
  return ` ${shown}${more} give the same results, so the choice among them does not matter on this workload.`;
}

function explain(
  grid: readonly SweepCell[],
  objective: SweepObjective,
  best: SweepCell,
  tied: readonly SweepCell[],
): string {
  const parts: string[] = [];
  const n = grid.length;
  const info = INFO[objective];
  const k = key(objective);
  const v = (c: SweepCell) => info.show(info.metric(c.result));
  const worst = [...grid].sort((a, b) => k(b) - k(a))[0]!;
  const top = info.higher ? 'highest' : 'lowest';
  const extreme = `${info.higher ? 'lowest' : 'highest'}: ${v(worst)} at ${at(worst)}`;
  const tie = objective === 'hit-rate' ? 'within 0.1 points' : 'within 1%';
  const others = tied.length - 1;
  const first = info.tieBreak[0] === p99 ? 'TTFT p99' : 'mean TTFT';
  const firstValue = info.tieBreak[0] === p99 ? p99(best.result) : mean(best.result);
  const among = `of these ${tied.length} it has the lowest ${first} (${fmtMs(firstValue)} ms)`;
  // The winner is the tie-breakers' pick among the cells within the tolerance of the extreme
  // value, which need not be a cell at it: then the verdict names both, so it stays true.
  const low = Math.min(...grid.map(k));
  const leaders = grid.filter((c) => k(c) === low);
  if (k(worst) === k(best)) {
    parts.push(
      `${at(best)} has the ${top} ${info.name}, ${v(best)}, as ${n > 1 ? `all ${n} settings do` : 'the only setting'}.`,
    );
  } else if (leaders.includes(best)) {
    parts.push(
      `${at(best)} has the ${top} ${info.name}, ${v(best)}, of ${n} settings (${extreme}).`,
    );
  } else {
    const lead = leaders[0]!;
    const also =
      leaders.length > 1 ? ` and ${leaders.length - 1} other${leaders.length > 2 ? 's' : ''}` : '';
    parts.push(
      `The ${top} ${info.name} of ${n} settings is ${v(lead)}, at ${at(lead)}${also} (${extreme}). ${at(best)} is ${tie} of that, at ${v(best)}, as ${others === 1 ? 'is 1 other setting' : `are ${others} other settings`}; ${among}.`,
    );
  }
  if (others > 0 && leaders.includes(best) && k(worst) !== k(best)) {
    parts.push(
      `${others === 1 ? '1 other setting is' : `${others} other settings are`} ${tie} of it on ${info.name}; ${among}.`,
    );
  } else if (others > 0 && k(worst) === k(best)) {
    parts.push(`Of these ${tied.length} it has the lowest ${first} (${fmtMs(firstValue)} ms).`);
  }
  if (objective === 'hit-rate') {
    const fastest = [...grid].sort((a, b) => nanLast(p99(a.result)) - nanLast(p99(b.result)))[0]!;
    if (fastest !== best && p99(fastest.result) < p99(best.result) * (1 - REL_TIE)) {
      parts.push(
        `Trade-off: ${at(fastest)} has a lower TTFT p99 (${fmtMs(p99(fastest.result))} ms vs ${fmtMs(p99(best.result))} ms) with hit rate ${fmtPct(hit(fastest.result))}, imbalance ${fmtNum(fastest.result.imbalance)} vs ${fmtNum(best.result.imbalance)}.`,
      );
    } else {
      parts.push(
        `It also has the lowest TTFT p99 of the ${grid.length} swept settings (${fmtMs(p99(best.result))} ms), so among them nothing is traded away.`,
      );
    }
    return parts.join(' ');
  }
  const mostHits = [...grid].sort((a, b) => hit(b.result) - hit(a.result))[0]!;
  if (hit(mostHits.result) > hit(best.result) + HIT_TIE) {
    parts.push(
      `Trade-off: ${at(mostHits)} caches more (hit rate ${fmtPct(hit(mostHits.result))} vs ${fmtPct(hit(best.result))}) but its ${info.name} is ${v(mostHits)} and its imbalance ${fmtNum(mostHits.result.imbalance)} vs ${fmtNum(best.result.imbalance)}${mostHits.result.imbalance > best.result.imbalance * 1.05 ? ': its extra hits concentrate work on fewer ranks, where requests queue' : ''}.`,
    );
  } else {
    parts.push(
      `It also has the highest hit rate of the ${grid.length} swept settings (${fmtPct(hit(best.result))}), so among them nothing is traded away.`,
    );
  }
  return parts.join(' ');
}
