// "Which policy for which workload and load": the plain table a comparison page opens with.
// Derived from the measured rows, never written by hand: per scenario, the method with the
// lowest TTFT p99, where methods within 5% of that p99 count as tied and the tie goes to the
// higher hit rate (the cache is what the next request pays for); per load curve, one row per
// run of adjacent loads with the same TTFT p99 winner, so each recommendation names the load
// range it was measured to hold for.
import type { LoadCurve } from './load-curve.ts';
import type { PolicyRow, ScenarioResult } from './policy-comparison.ts';

export interface Recommendation {
  workload: string;
  load: string;
  method: string;
  why: string;
}

/** TTFT p99 within this factor of the best counts as a tie. */
const TIE = 1.05;

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;

function pick(rows: readonly PolicyRow[]): { best: PolicyRow; runnerUp?: PolicyRow } {
  const finite = rows.filter((r) => r.ttftP99 !== null && Number.isFinite(r.ttftP99));
  const pool = finite.length > 0 ? finite : [...rows];
  const minP99 = Math.min(...pool.map((r) => r.ttftP99 ?? Number.POSITIVE_INFINITY));
  const tied = pool.filter((r) => (r.ttftP99 ?? Number.POSITIVE_INFINITY) <= minP99 * TIE);
  const best = [...tied].sort(
    (a, b) => b.hitRate - a.hitRate || (a.ttftP99 ?? 0) - (b.ttftP99 ?? 0),
  )[0]!;
  const others = pool.filter((r) => r !== best).sort((a, b) => (a.ttftP99 ?? 0) - (b.ttftP99 ?? 0));
  return { best, runnerUp: others[0] };
}

function scenarioLoad(s: ScenarioResult): string {
  const m = /-x([\d.]+)$/.exec(s.id);
  if (m) return `x${m[1]} the trace's pace`;
  const rate = s.options.ratePerS ?? s.options.sessionsPerS;
  if (typeof rate === 'number') return `as generated (${rate}/s)`;
  return 'as generated';
}

export function recommend(
  scenarios: readonly ScenarioResult[],
  curves: readonly LoadCurve[],
): Recommendation[] {
  const out: Recommendation[] = [];
  for (const s of scenarios) {
    if (s.rows.length === 0) continue;
    const { best, runnerUp } = pick(s.rows);
    const vs = runnerUp
      ? `; next best \`${runnerUp.policy}\` ${Math.round(runnerUp.ttftP99 ?? 0)} ms, ${pct(runnerUp.hitRate)}`
      : '';
    out.push({
      workload: s.title,
      load: scenarioLoad(s),
      method: best.policy,
      why: `TTFT p99 ${Math.round(best.ttftP99 ?? 0)} ms, hit rate ${pct(best.hitRate)}${vs}`,
    });
  }
  for (const c of curves) {
    let start = 0;
    const winners = c.points.map((p) => {
      const rows = [...p.rows].sort((a, b) => a.ttftP99 - b.ttftP99);
      return rows[0]!;
    });
    for (let i = 1; i <= c.points.length; i++) {
      if (i < c.points.length && winners[i]!.policy === winners[start]!.policy) continue;
      const lo = c.points[start]!;
      const hi = c.points[i - 1]!;
      const range =
        lo === hi
          ? `x${lo.multiplier} (${lo.rateRps} req/s)`
          : `x${lo.multiplier}-x${hi.multiplier} (${lo.rateRps}-${hi.rateRps} req/s)`;
      const p99s = winners.slice(start, i).map((w) => Math.round(w.ttftP99));
      out.push({
        workload: c.title,
        load: range,
        method: winners[start]!.policy,
        why: `lowest TTFT p99 at each of these loads (${p99s.join(', ')} ms)`,
      });
      start = i;
    }
  }
  return out;
}
