// Picks the best cell of a window x prefix-length sweep and says why, in words a user can
// act on. Near-ties are common (on seed-sequential every setting shares the one cold
// request that sets p99), so cells within a small tolerance of the best count as tied and
// are separated by secondary metrics instead of by float noise.
import { fmtMs, fmtNum, fmtPct } from './format.ts';
import type { PolicyReport, SweepCell, SweepObjective, SweepReport } from './types.ts';

/** Relative tolerance for TTFT objectives, absolute (in hit-rate points) for hit rate. */
const TTFT_TIE = 0.01;
const HIT_TIE = 0.001;

const p99 = (c: SweepCell) => c.result.ttftMs.p99;
const mean = (c: SweepCell) => c.result.ttftMs.mean;
const hit = (c: SweepCell) => c.result.hitRate;
const at = (c: SweepCell) => `window=${c.window} prefix-length=${c.prefixLength}`;

function primary(objective: SweepObjective): (c: SweepCell) => number {
  // Lower is better for every key: hit rate is negated.
  if (objective === 'hit-rate') return (c) => -hit(c);
  return objective === 'ttft-p99' ? p99 : mean;
}

function compareCells(objective: SweepObjective): (a: SweepCell, b: SweepCell) => number {
  const keys: ((c: SweepCell) => number)[] =
    objective === 'ttft-p99'
      ? [mean, (c) => -hit(c)]
      : objective === 'ttft-mean'
        ? [p99, (c) => -hit(c)]
        : [p99, mean];
  // Finally prefer the smaller (cheaper to hash, less specific) setting.
  keys.push(
    (c) => c.prefixLength,
    (c) => c.window,
  );
  return (a, b) => {
    for (const k of keys) {
      const d = nanLast(k(a)) - nanLast(k(b));
      if (d !== 0) return d;
    }
    return 0;
  };
}

function nanLast(x: number): number {
  return Number.isFinite(x) ? x : Number.POSITIVE_INFINITY;
}

/**
 * What the grid alone does not say: ranks the chosen setting leaves without prefill work (the
 * policy funnels every prompt elsewhere), and how the recommended default method, run on the
 * same workload, compares with the chosen cell.
 */
export function sweepNotes(
  best: SweepCell,
  reference: PolicyReport | undefined,
  objective: SweepObjective,
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
  if (reference !== undefined) {
    const [name, value, ref] =
      objective === 'hit-rate'
        ? ['hit rate', fmtPct(hit(best)), fmtPct(reference.hitRate)]
        : objective === 'ttft-p99'
          ? ['TTFT p99', `${fmtMs(p99(best))} ms`, `${fmtMs(reference.ttftMs.p99)} ms`]
          : ['mean TTFT', `${fmtMs(mean(best))} ms`, `${fmtMs(reference.ttftMs.mean)} ms`];
    const bestKey = primary(objective)(best);
    const refKey =
      objective === 'hit-rate'
        ? -reference.hitRate
        : objective === 'ttft-p99'
          ? reference.ttftMs.p99
          : reference.ttftMs.mean;
    const verdict =
      nanLast(refKey) < nanLast(bestKey)
        ? `better than every setting of this grid`
        : nanLast(refKey) > nanLast(bestKey)
          ? `behind the chosen setting`
          : `level with the chosen setting`;
    parts.push(
      `The recommended default, ${reference.policy} with its default options, gets ${name} ${ref} on the same workload (chosen: ${value}; hit rate ${fmtPct(reference.hitRate)}, imbalance ${fmtNum(reference.imbalance)}): ${verdict}.`,
    );
  }
  return parts.length > 0 ? ` ${parts.join(' ')}` : '';
}

/** Whether `c` is the cell the report names as best (reports carry the best's coordinates). */
export function isBestCell(report: SweepReport, c: SweepCell): boolean {
  return c.window === report.best.window && c.prefixLength === report.best.prefixLength;
}

export function chooseBest(
  grid: readonly SweepCell[],
  objective: SweepObjective,
): { best: SweepCell; reason: string } {
  if (grid.length === 0) throw new Error('chooseBest: empty sweep grid');
  const key = primary(objective);
  const bestValue = Math.min(...grid.map((c) => nanLast(key(c))));
  const tied = grid.filter((c) => {
    const v = nanLast(key(c));
    if (objective === 'hit-rate') return v <= bestValue + HIT_TIE;
    return v <= bestValue * (1 + TTFT_TIE) + 1e-9;
  });
  const best = [...tied].sort(compareCells(objective))[0]!;
  return { best, reason: `${explain(grid, objective, best, tied.length)}${sameAs(grid, best)}` };
}

/** Cells whose results equal the best's: the knob made no difference there, worth saying. */
function sameAs(grid: readonly SweepCell[], best: SweepCell): string {
  const same = (a: number, b: number) =>
    a === b || Math.abs(a - b) <= 1e-9 * Math.max(Math.abs(a), Math.abs(b));
  const twins = grid.filter(
    (c) =>
      c !== best &&
      same(p99(c), p99(best)) &&
      same(mean(c), mean(best)) &&
      same(hit(c), hit(best)) &&
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
  tiedCount: number,
): string {
  const parts: string[] = [];
  const n = grid.length;
  if (objective === 'hit-rate') {
    const worst = [...grid].sort((a, b) => hit(a) - hit(b))[0]!;
    parts.push(
      `${at(best)} has the highest token hit rate, ${fmtPct(hit(best))}, of ${n} settings (lowest: ${fmtPct(hit(worst))} at ${at(worst)}).`,
    );
    if (tiedCount > 1)
      parts.push(
        `${tiedCount} settings are within 0.1 points of it; among them it has the lowest TTFT p99 (${fmtMs(p99(best))} ms).`,
      );
    const fastest = [...grid].sort((a, b) => nanLast(p99(a)) - nanLast(p99(b)))[0]!;
    if (fastest !== best && p99(fastest) < p99(best) * (1 - TTFT_TIE)) {
      parts.push(
        `Trade-off: ${at(fastest)} has a lower TTFT p99 (${fmtMs(p99(fastest))} ms vs ${fmtMs(p99(best))} ms) with hit rate ${fmtPct(hit(fastest))}, imbalance ${fmtNum(fastest.result.imbalance)} vs ${fmtNum(best.result.imbalance)}.`,
      );
    } else {
      parts.push(
        `It also has the lowest TTFT p99 (${fmtMs(p99(best))} ms), so nothing is traded away.`,
      );
    }
    return parts.join(' ');
  }
  const metric = objective === 'ttft-p99' ? p99 : mean;
  const name = objective === 'ttft-p99' ? 'TTFT p99' : 'mean TTFT';
  const other = objective === 'ttft-p99' ? mean : p99;
  const otherName = objective === 'ttft-p99' ? 'mean TTFT' : 'TTFT p99';
  const worst = [...grid].sort((a, b) => nanLast(metric(b)) - nanLast(metric(a)))[0]!;
  parts.push(
    `${at(best)} has the lowest ${name}, ${fmtMs(metric(best))} ms, of ${n} settings (highest: ${fmtMs(metric(worst))} ms at ${at(worst)}).`,
  );
  if (tiedCount > 1) {
    parts.push(
      `${tiedCount} settings are within 1% of it on ${name}; among them it has the lowest ${otherName} (${fmtMs(other(best))} ms).`,
    );
  }
  const mostHits = [...grid].sort((a, b) => hit(b) - hit(a))[0]!;
  if (hit(mostHits) > hit(best) + HIT_TIE) {
    parts.push(
      `Trade-off: ${at(mostHits)} caches more (hit rate ${fmtPct(hit(mostHits))} vs ${fmtPct(hit(best))}) but its ${name} is ${fmtMs(metric(mostHits))} ms and its imbalance ${fmtNum(mostHits.result.imbalance)} vs ${fmtNum(best.result.imbalance)}${mostHits.result.imbalance > best.result.imbalance * 1.05 ? ': its extra hits concentrate work on fewer ranks, where requests queue' : ''}.`,
    );
  } else {
    parts.push(
      `It also has the highest hit rate (${fmtPct(hit(best))}), so nothing is traded away.`,
    );
  }
  return parts.join(' ');
}
